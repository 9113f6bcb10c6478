"""Security and robustness of the reference server: TLS, authentication, entitlements,
slow-client limits and connection caps.

* :mod:`.policy`: :class:`ServerSecurity` builds a :class:`TransportPolicy` per transport
  from the configuration;
* :mod:`.guard`: the broker hook (``Broker.guard``) for logons and entitlements;
* :mod:`.auth`: authentication and entitlement modules; :mod:`.users`: the users file and its
  command line; :mod:`.passwords`: salted hashes;
* resource pools and client limits are configured here (:class:`.policy.PoolLimits`,
  :class:`.policy.ClientLimits`) and run by the network layer (``net.flow``: offlining to disk,
  age and capacity limits);
* :mod:`.replication`: credentials for replication links.
"""

from __future__ import annotations

from .auth import AuthVerdict, SecurityConfigError
from .policy import ServerSecurity, TransportPolicy

__all__ = ["AuthVerdict", "SecurityConfigError", "ServerSecurity", "TransportPolicy"]
