"""Authentication and tenancy: API keys per tenant, hashed at rest, checked on every /v1 request.

- `keys`: what a key is, its keyed hash, roles and the `Principal` a request speaks for (pure);
- `policy`: which role a route needs and whether a principal may make a request (pure);
- `secret`: the hashing secret (MEMSTREAM_AUTH_SECRET or data_dir/auth-secret) and 0600 files;
- `store`: the `api_keys` table;
- `verifier`: the cached check of a presented key, last-used times written in the background;
- `bootstrap`: the operator key `memstream up` writes to data_dir/api-key.

The HTTP side is `services/api/auth.py`; the CLI is `services/cli/keys.py`.
"""

from services.auth.keys import UNAUTHENTICATED_OPERATOR, Principal, Role
from services.auth.policy import Denial, authorize, named_tenants, required_role
from services.auth.secret import load_secret
from services.auth.store import ApiKey, KeyStore
from services.auth.verifier import KeyVerifier

__all__ = [
    "UNAUTHENTICATED_OPERATOR",
    "ApiKey",
    "Denial",
    "KeyStore",
    "KeyVerifier",
    "Principal",
    "Role",
    "authorize",
    "load_secret",
    "named_tenants",
    "required_role",
]
