"""memstream's Python client with asyncio: the same calls as the sync client, awaited, several at once.

MEMSTREAM_URL=http://localhost:8080 MEMSTREAM_API_KEY=... python docs/examples/client_async.py acme u-42
"""

from __future__ import annotations

import asyncio
import os
import sys

import memstream


async def main(tenant: str, user: str) -> int:
    url = os.environ.get("MEMSTREAM_URL", "http://localhost:8080")
    key = os.environ.get("MEMSTREAM_API_KEY")
    async with memstream.AsyncClient(url, api_key=key, timeout=30, retries=1) as client:
        # Recall and the listing at the same time, over one connection pool.
        found, listed = await asyncio.gather(
            client.recall(tenant, user, "how does the user take their coffee?", top_k=5),
            client.list_memories(tenant, user, status="active"),
        )
        print(found.prompt)
        print(f"{len(listed)} active memories")

        if listed:
            first = listed[0]
            detail = await client.get_memory(tenant, user, first.id)
            print(f"{first.text!r} comes from {[turn.event_id for turn in detail.sources]}")
            try:
                receipt = await client.correct_memory(tenant, user, first.id, first.text + " (checked)", wait=True)
                print(f"correction {receipt.status}: new version {receipt.memory_id}")
            except memstream.Unavailable as exc:
                print(f"not applied now ({exc.code}), retry after {exc.retry_after} s")
            except memstream.NotFound:
                print("that memory is gone")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:] or ["acme", "u-42"]
    sys.exit(asyncio.run(main(args[0], args[1])))
