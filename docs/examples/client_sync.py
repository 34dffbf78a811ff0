"""memstream's Python client, synchronously: recall, list, add (waiting until it is applied), handle errors.

Run it against a running read service:

    MEMSTREAM_URL=http://localhost:8080 MEMSTREAM_API_KEY=... python docs/examples/client_sync.py acme u-42
"""

from __future__ import annotations

import os
import sys

import memstream


def main(tenant: str, user: str) -> int:
    url = os.environ.get("MEMSTREAM_URL", "http://localhost:8080")
    key = os.environ.get("MEMSTREAM_API_KEY")
    with memstream.Client(url, api_key=key, timeout=30, retries=1) as client:
        ready = client.readyz()
        print(f"ready: {ready.ready} {ready.checks}")

        # What to put in the system prompt before answering the user.
        found = client.recall(tenant, user, "how does the user take their coffee?", top_k=5)
        print(found.prompt)
        for memory in found.memories:
            print(f"{memory.score:.3f} [{memory.type}] {memory.text}")

        for held in client.list_memories(tenant, user, status="active", limit=20):
            print(f"{held.id} v{held.version} {held.text}")

        # A memory by hand; wait=True answers once it shows in recall (read your own write).
        try:
            receipt = client.add_memory(
                tenant, user, "Prefers aisle seats on long flights", type="preference", wait=True
            )
            print(f"add {receipt.status}: {receipt.memory_id}")
        except memstream.Unavailable as exc:
            # The broker did not take the command: nothing was written; try again later.
            print(f"not applied now ({exc.code}), retry after {exc.retry_after} s")
        except memstream.APIError as exc:
            print(f"refused: {exc.status} {exc.code}: {exc.message}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    args = sys.argv[1:] or ["acme", "u-42"]
    sys.exit(main(args[0], args[1]))
