"""TLS for ``tcps://`` and ``wss://`` connections.

Certificate verification is on by default: without an ``ssl_context`` the client verifies the
server against the system's trusted CAs and checks the host name (an IP address in the URI is
checked against the certificate's IP subject alternative names). :func:`client_context` builds
a context for the common cases::

    ctx = client_context(cafile="ca.pem", certfile="client.pem", keyfile="client.key")
    client = Client("c1", ssl_context=ctx)
    client.connect("tcps://127.0.0.1:9443/amps/json")
"""

from __future__ import annotations

import os
import ssl

__all__ = ["client_context", "server_context"]

StrPath = str | os.PathLike[str]


def client_context(
    *,
    cafile: StrPath | None = None,
    capath: StrPath | None = None,
    certfile: StrPath | None = None,
    keyfile: StrPath | None = None,
    password: str | None = None,
    verify: bool = True,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """An :class:`ssl.SSLContext` for connecting to a server.

    Args:
        cafile: PEM file of the CAs to trust (default: the system's trust store).
        capath: a directory of hashed CA certificates (``c_rehash`` layout).
        certfile: PEM client certificate (for servers that require one); may hold the key too.
        keyfile: the client certificate's private key, when not in ``certfile``.
        password: password of an encrypted private key.
        verify: verify the server's certificate (turn off only for throwaway tests).
        check_hostname: check that the certificate names the host of the URI.
    """
    ctx = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH,
        cafile=None if cafile is None else os.fspath(cafile),
        capath=None if capath is None else os.fspath(capath),
    )
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = check_hostname
    if certfile is not None:
        ctx.load_cert_chain(
            os.fspath(certfile), None if keyfile is None else os.fspath(keyfile), password
        )
    return ctx


def server_context(
    *,
    certfile: StrPath,
    keyfile: StrPath | None = None,
    password: str | None = None,
    cafile: StrPath | None = None,
    require_client_cert: bool = False,
) -> ssl.SSLContext:
    """An :class:`ssl.SSLContext` for a listening server.

    Args:
        certfile: PEM server certificate chain (may hold the key too).
        keyfile: the private key, when not in ``certfile``.
        password: password of an encrypted private key.
        cafile: CAs that client certificates must chain to.
        require_client_cert: refuse clients without a certificate signed by ``cafile``'s CAs
            (with ``cafile`` and without this, a client certificate is verified when sent).
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(
        os.fspath(certfile), None if keyfile is None else os.fspath(keyfile), password
    )
    if cafile is not None:
        ctx.load_verify_locations(cafile=os.fspath(cafile))
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    elif require_client_cert:
        raise ValueError("require_client_cert needs a cafile to verify client certificates")
    return ctx
