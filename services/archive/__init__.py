"""The encrypted archive (memory.archive): every accepted turn, sealed with its user's data key.

- `codec`: the record format, sealing and opening, key wrapping (pure);
- `master`: the master key, from settings or the data dir;
- `keys`: `KeyStore`, the per-user data keys in Postgres (table user_keys);
- `reader`: `archived_events`, a replay of the archive that skips forgotten users.

The window stage writes the archive (agents/window); rebuilds read it. See
the README's "Archive and forgetting".
"""

from services.archive.codec import DataKey, MasterKey, RecordRejected
from services.archive.keys import KeyStore, MasterKeyMismatch
from services.archive.master import load_master_key
from services.archive.reader import ReplayStats, archived_events, read_topic

__all__ = [
    "DataKey",
    "KeyStore",
    "MasterKey",
    "MasterKeyMismatch",
    "RecordRejected",
    "ReplayStats",
    "archived_events",
    "load_master_key",
    "read_topic",
]
