#!/usr/bin/env node
/*
 * Interop scenario: the official AMPS JavaScript client (npm `amps`, a black-box test
 * peer only) against ampsclient_server_stub's WebSocket listener.
 *
 * Usage: node scenario.js ws://127.0.0.1:PORT/amps/json [--timeout MS] [--trace]
 *
 * Steps: connect + logon; subscribe with a content filter; publish messages (some
 * matching); check that exactly the matching ones arrive, in order, with their data;
 * unsubscribe; publish records to the SOW topic /ADMIN/bookmark_store (keyed by
 * /clientName,/subId), flush, run a `sow` query (several batches) and check the records;
 * disconnect.
 *
 * Prints exactly one JSON line on stdout: {"ok": true|false, "reason": ..., "steps": {...}}
 * and exits 0 on success, 1 when a check failed, 2 on the overall timeout, 3 on bad usage.
 * With --trace (or AMPS_INTEROP_TRACE=1) every WebSocket frame in both directions is
 * written to stderr; the last frames are always included in the result on failure.
 */
'use strict';

const path = require('path');

const args = process.argv.slice(2);
let uri = null;
let timeoutMs = 20000;
let trace = process.env.AMPS_INTEROP_TRACE === '1';
for (let i = 0; i < args.length; i++) {
    if (args[i] === '--timeout') {
        timeoutMs = Number(args[++i]);
    } else if (args[i] === '--trace') {
        trace = true;
    } else if (uri === null) {
        uri = args[i];
    } else {
        uri = undefined;
    }
}

const result = { ok: false, reason: null, uri: uri, steps: {} };
const frames = [];
const MAX_FRAMES = 200;
let finished = false;

function finish(ok, reason, code) {
    if (finished) {
        return;
    }
    finished = true;
    result.ok = ok;
    result.reason = reason;
    if (!ok) {
        result.frames = frames.slice(-60);
    }
    process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(code));
}

if (!uri || !/^wss?:\/\//.test(uri) || !Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    finish(false, 'usage: node scenario.js ws://HOST:PORT/amps/json [--timeout MS] [--trace]', 3);
    return;
}

const deadline = setTimeout(() => {
    finish(false, 'scenario timed out after ' + timeoutMs + ' ms (last step: ' + currentStep + ')', 2);
}, timeoutMs);
let currentStep = 'load';

process.on('unhandledRejection', (err) => {
    finish(false, 'unhandled rejection in step ' + currentStep + ': ' + describe(err), 1);
});
process.on('uncaughtException', (err) => {
    finish(false, 'uncaught exception in step ' + currentStep + ': ' + describe(err), 1);
});

function describe(err) {
    if (err instanceof Error) {
        return err.message || String(err);
    }
    if (err && typeof err === 'object') {
        try {
            return JSON.stringify(err);
        } catch (e) {
            return String(err);
        }
    }
    return String(err);
}

function frameText(data) {
    if (typeof data === 'string') {
        return data;
    }
    if (data && typeof data === 'object' && !(data instanceof ArrayBuffer) && !ArrayBuffer.isView(data)) {
        // incoming frames reach the transport filter as WebSocket message events
        if ('data' in data) {
            return frameText(data.data);
        }
        return describe(data);
    }
    try {
        const buf = Buffer.from(data instanceof ArrayBuffer ? new Uint8Array(data) : data);
        return buf.length <= 8 ? '<binary ' + buf.toString('hex') + '>' : buf.toString('utf8');
    } catch (e) {
        return '<' + typeof data + '>';
    }
}

function recordFrame(data, outgoing) {
    const line = (outgoing ? '> ' : '< ') + frameText(data);
    if (frames.length >= MAX_FRAMES) {
        frames.shift();
    }
    frames.push(line);
    if (trace) {
        process.stderr.write('[js-frame] ' + line + '\n');
    }
}

function fail(message) {
    throw new Error(message);
}

function check(condition, message) {
    if (!condition) {
        fail(message);
    }
}

function sameJson(a, b) {
    return JSON.stringify(a) === JSON.stringify(b);
}

function waitFor(predicate, what, ms) {
    return new Promise((resolve, reject) => {
        const started = Date.now();
        const poll = () => {
            if (predicate()) {
                resolve();
            } else if (Date.now() - started > ms) {
                reject(new Error('timed out after ' + ms + ' ms waiting for ' + what));
            } else {
                setTimeout(poll, 10);
            }
        };
        poll();
    });
}

function withTimeout(promise, what, ms) {
    let timer;
    return Promise.race([
        promise,
        new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error(what + ' did not complete within ' + ms + ' ms')), ms);
        }),
    ]).finally(() => clearTimeout(timer));
}

async function main() {
    currentStep = 'load';
    let amps;
    try {
        amps = require(path.join(__dirname, 'node_modules', 'amps'));
    } catch (err) {
        finish(false, 'cannot load the amps npm package: ' + describe(err), 1);
        return;
    }
    const Client = amps.Client;
    const STEP_MS = Math.max(1000, Math.floor(timeoutMs / 4));
    const clientName = 'interop-js-' + process.pid + '-' + Date.now();
    const topic = 'interop_js_orders_' + process.pid;
    const sowTopic = '/ADMIN/bookmark_store';

    const errors = [];
    const client = new Client(clientName);
    client.transportFilter((data, outgoing) => recordFrame(data, outgoing));
    client.errorHandler((err) => errors.push(describe(err)));
    result.steps.errors = errors;
    const unexpected = [];
    client.lastChanceMessageHandler((message) => {
        unexpected.push({
            command: message.header.command(),
            ack_type: message.header.ackType(),
            cid: message.header.commandId(),
            sub_id: message.header.subId(),
            sids: message.header.subIds(),
            query_id: message.header.queryId(),
            status: message.header.status(),
        });
    });
    result.steps.last_chance = unexpected;

    // 1. connect + logon -------------------------------------------------------------
    currentStep = 'connect';
    await withTimeout(client.connect(uri), 'connect/logon', STEP_MS);
    result.steps.connect = {
        client_name: clientName,
        connected: client.isConnected(),
        server_version: client.serverVersion(),
        server_version_int: client.serverVersionAsInt(),
    };
    check(client.isConnected(), 'client reports not connected after logon');

    // 2. filtered subscription --------------------------------------------------------
    currentStep = 'subscribe';
    const delivered = [];
    const subId = await withTimeout(
        client.subscribe((message) => {
            delivered.push({
                command: message.header.command(),
                topic: message.header.topic(),
                sids: message.header.subIds(),
                sub_id: message.header.subId(),
                data: message.data,
            });
        }, topic, '/qty > 10'),
        'subscribe',
        STEP_MS
    );
    result.steps.subscribe = { topic: topic, filter: '/qty > 10', sub_id: subId };
    check(typeof subId === 'string' && subId.length > 0, 'subscribe resolved without a sub id');

    // 3. publish: some match the filter, some do not ------------------------------------
    currentStep = 'publish';
    const published = [
        { id: 1, qty: 5, sym: 'AAA' },
        { id: 2, qty: 15, sym: 'BBB' },
        { id: 3, qty: 10, sym: 'CCC' },
        { id: 4, qty: 20, sym: 'D"D\\D', note: 'quotes and backslash' },
        { id: 5, qty: -1, sym: 'EEE' },
        { id: 6, qty: 11.5, sym: 'FFF', note: 'unicode \u00e9\u4e2d' },
    ];
    const expectedIds = [2, 4, 6];
    for (const body of published) {
        client.publish(topic, body);
    }
    currentStep = 'flush after publish';
    await withTimeout(client.flush(), 'flush after publish', STEP_MS);
    // a final matching marker: anything that should not arrive would arrive before it
    const marker = { id: 99, qty: 1000, sym: 'END' };
    client.publish(topic, marker);
    currentStep = 'await deliveries';
    await waitFor(
        () => delivered.some((m) => m.data && m.data.id === 99),
        'the marker message on the subscription',
        STEP_MS
    );
    const expected = published.filter((m) => expectedIds.includes(m.id)).concat([marker]);
    result.steps.publish = {
        published: published.concat([marker]),
        expected_ids: expected.map((m) => m.id),
        delivered: delivered,
    };
    check(
        delivered.length === expected.length,
        'expected ' + expected.length + ' deliveries (ids ' + expected.map((m) => m.id).join(',') +
            '), got ' + delivered.length + ' (ids ' + delivered.map((m) => m.data && m.data.id).join(',') + ')'
    );
    expected.forEach((want, i) => {
        const got = delivered[i];
        check(sameJson(got.data, want), 'delivery ' + i + ': data ' + JSON.stringify(got.data) + ' != ' + JSON.stringify(want));
        // routing field of deliveries is `sids` (protocol.md 5.2); the JS client exposes it as
        // subIds() and does not fill subId() from it
        check(
            typeof got.sids === 'string' && got.sids.split(',').includes(subId),
            'delivery ' + i + ': sids ' + got.sids + ' does not name ' + subId
        );
        check(got.topic === topic, 'delivery ' + i + ': topic ' + got.topic + ' != ' + topic);
        check(got.command === 'p' || got.command === 'publish', 'delivery ' + i + ': command ' + got.command);
    });

    // 4. unsubscribe (the JS client waits for the processed ack) -------------------------
    currentStep = 'unsubscribe';
    const unsubResult = await withTimeout(client.unsubscribe(subId), 'unsubscribe', STEP_MS);
    result.steps.unsubscribe = { sub_id: subId, result: unsubResult === undefined ? null : unsubResult };
    const countBefore = delivered.length;
    client.publish(topic, { id: 100, qty: 500, sym: 'AFTER' });
    await withTimeout(client.flush(), 'flush after unsubscribe', STEP_MS);
    result.steps.unsubscribe.deliveries_after = delivered.length - countBefore;
    check(delivered.length === countBefore, 'a message arrived after unsubscribe');

    // 5. SOW: publish records to /ADMIN/bookmark_store, flush, query ----------------------
    currentStep = 'sow publish';
    const otherName = clientName + '-other';
    const sowPublished = [
        { clientName: clientName, subId: 'sub-a', bookmark: '111|1|' },
        { clientName: clientName, subId: 'sub-b', bookmark: '111|2|' },
        { clientName: otherName, subId: 'sub-a', bookmark: '222|1|' },
        { clientName: clientName, subId: 'sub-c', bookmark: '111|3|' },
        { clientName: clientName, subId: 'sub-a', bookmark: '111|4|' }, // replaces sub-a
    ];
    for (const record of sowPublished) {
        client.publish(sowTopic, record);
    }
    await withTimeout(client.flush(), 'flush after sow publish', STEP_MS);

    currentStep = 'sow query';
    const sowMessages = [];
    let groupEnded = false;
    const sowFilter = "/clientName = '" + clientName + "'";
    const queryId = await withTimeout(
        client.sow((message) => {
            const command = message.header.command();
            const entry = { command: command };
            if (command === 'sow') {
                entry.sow_key = message.header.sowKey();
                entry.topic = message.header.topic();
                entry.query_id = message.header.queryId();
                entry.bookmark = message.header.bookmark();
                entry.data = message.data;
            } else if (command === 'ack') {
                entry.ack_type = message.header.ackType();
                entry.status = message.header.status();
                entry.reason = message.header.reason();
            } else {
                entry.query_id = message.header.queryId();
            }
            sowMessages.push(entry);
            if (command === 'group_end') {
                groupEnded = true;
            }
        }, sowTopic, sowFilter, { batchSize: 2, orderBy: '/subId' }),
        'sow',
        STEP_MS
    );
    await waitFor(() => groupEnded, 'group_end of the sow query', STEP_MS);
    const records = sowMessages.filter((m) => m.command === 'sow');
    const expectedRecords = [
        { clientName: clientName, subId: 'sub-a', bookmark: '111|4|' },
        { clientName: clientName, subId: 'sub-b', bookmark: '111|2|' },
        { clientName: clientName, subId: 'sub-c', bookmark: '111|3|' },
    ];
    result.steps.sow = {
        topic: sowTopic,
        filter: sowFilter,
        query_id: queryId,
        messages: sowMessages,
        published: sowPublished,
        expected_records: expectedRecords,
    };
    const commands = sowMessages.map((m) => m.command);
    check(commands[0] === 'group_begin', 'sow: first message is ' + commands[0] + ', not group_begin');
    check(commands[commands.length - 1] === 'group_end', 'sow: last message is not group_end');
    check(
        records.length === expectedRecords.length,
        'sow: expected ' + expectedRecords.length + ' records, got ' + records.length
    );
    const keys = new Set();
    expectedRecords.forEach((want, i) => {
        const got = records[i];
        check(sameJson(got.data, want), 'sow record ' + i + ': ' + JSON.stringify(got.data) + ' != ' + JSON.stringify(want));
        check(typeof got.sow_key === 'string' && got.sow_key.length > 0, 'sow record ' + i + ': no sow key');
        keys.add(got.sow_key);
    });
    check(keys.size === records.length, 'sow: records share sow keys');

    // 6. disconnect ------------------------------------------------------------------------
    currentStep = 'disconnect';
    await withTimeout(client.disconnect(), 'disconnect', STEP_MS);
    result.steps.disconnect = { connected: client.isConnected() };
    check(errors.length === 0, 'client error handler reported: ' + errors.join('; '));
    check(
        unexpected.length === 0,
        'messages reached the last-chance handler: ' + JSON.stringify(unexpected)
    );
    clearTimeout(deadline);
    finish(true, null, 0);
}

main().catch((err) => {
    clearTimeout(deadline);
    finish(false, 'step ' + currentStep + ': ' + describe(err), 1);
});
