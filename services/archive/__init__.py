"""Per-user encryption of the long-lived logs: `memory.archive` (every accepted turn) and `memory.changes`.

- `codec`: the archive record, the sealing both logs share, key wrapping (pure);
- `master`: the master key, from settings or the data dir;
- `keys`: `KeyStore`, the per-user data keys in Postgres (table user_keys);
- `reader`: `archived_events`, a replay of the archive that skips forgotten users;
- `changes`: `memory.changes` sealed in the writer's transaction, and `open_changes`,
  the one way its consumers open a batch.

The window stage writes the archive (agents/window); rebuilds read it. The
consolidator, its commands stage and maintenance write the changes; the
qdrant sink, `rebuild store` and `memstream changes` read them. See the
docs/operations/forgetting.md.
"""

from services.archive.changes import ChangeSealer, open_changes, open_messages, seal_changes
from services.archive.codec import DataKey, MasterKey, RecordRejected
from services.archive.keys import KeyStore, MasterKeyMismatch
from services.archive.master import load_master_key
from services.archive.reader import ReplayStats, archived_events, read_topic

__all__ = [
    "ChangeSealer",
    "DataKey",
    "KeyStore",
    "MasterKey",
    "MasterKeyMismatch",
    "RecordRejected",
    "ReplayStats",
    "archived_events",
    "load_master_key",
    "open_changes",
    "open_messages",
    "read_topic",
    "seal_changes",
]
