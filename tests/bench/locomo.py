"""`make bench-locomo`: evidence recall on LoCoMo-format conversations, through the real pipeline.

    python -m tests.bench.locomo [--data PATH] [--out FILE] [--base-url URL --bootstrap HOST:PORT --api-key KEY]

Each conversation is replayed through Kafka as one user's chat turns, every
question is asked through POST /v1/recall, and the retrieved memories'
provenance (the LoCoMo turn ids in `metadata.dia_id`) is scored against the
question's evidence. The JSONL it writes, one line per question (its sample_id, qa_index
and retrieved memories with their source turn ids), lets any scorer recompute these R@k figures.

After scoring, one maintenance pass per conversation (`memstream maintain`'s
code, `maintain_once`) runs as of one day after its last session, and the
summary gets each user's active memories by type before and after it, what
the pass did (compressed into patterns, pruned, synthesized, deferred), and
the same questions scored again over the tended memory (an extra table: the
main table is always the one before maintenance), with how often a pattern or
semantic memory made a question's top 10 and covered its evidence.

The episodes the replay made (before maintenance) are written one line per
session to `<out>-episodes.jsonl` (`bench-results/locomo-episodes.jsonl` by
default: `sample_id`, `session`, `episodes`), and their coverage of LoCoMo's
reference session summaries is printed with their length
(`tests/bench/coverage.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx
import psycopg

from agents.maintenance.standalone import maintain_once
from services.core.config import Settings
from services.core.textutil import count_tokens
from tests.bench import generation as generation_bench
from tests.bench.coverage import (
    Episode,
    coverage_summary,
    format_coverage,
    reference_summaries,
    session_lines,
    stems,
)
from tests.bench.pipeline import replay
from tests.bench.probe import wait_drained
from tests.stack import embedded_stack, session_end, stack_settings, turn

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "bench" / "locomo_dev.json"
TENANT = "locomo"
KS = (1, 5, 10, 25, 50)
BACKED_SHARE = 0.5  # of an evidence turn's content stems a memory's text must hold to back it
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_SESSION = re.compile(r"session_(\d+)")
_DIA = re.compile(r"D:?(\d+):(\d+)")


def session_time(text: str) -> datetime:
    """LoCoMo's '1:56 pm on 8 May, 2023' as an aware datetime (UTC: the data has no zone)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def sessions(conversation: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]]]]:
    numbered = [(int(m.group(1)), turns) for key, turns in conversation.items() if (m := _SESSION.fullmatch(key))]
    return sorted(numbered, key=lambda pair: pair[0])


def turn_text(turn: dict[str, Any]) -> str:
    caption = turn.get("blip_caption")
    return f"{turn['speaker']}: {turn['text']}" + (f" [shares {caption}]" if caption else "")


def to_events(sample: dict[str, Any], user: str) -> list[dict[str, Any]]:
    """One conversation as chat events: every turn a user turn, each session closed by session_end."""
    conversation = sample["conversation"]
    events: list[dict[str, Any]] = []
    for number, turns in sessions(conversation):
        session = f"{sample['sample_id']}-s{number}"
        start = session_time(conversation[f"session_{number}_date_time"])
        for index, said in enumerate(turns):
            at = start + timedelta(seconds=30 * index)
            event = turn(TENANT, user, session, index, turn_text(said), "user", at, dia_id=said["dia_id"])
            # Stable ids from the dataset (':' is not allowed in ids).
            events.append({**event, "event_id": f"{user}-{said['dia_id'].replace(':', '.')}"})
        events.append(session_end(TENANT, user, session, start + timedelta(seconds=30 * len(turns))))
    return events


def maintenance_time(sample: dict[str, Any]) -> datetime:
    """One day after the conversation's last session began: the moment its maintenance pass runs as of."""
    conversation = sample["conversation"]
    last, _ = sessions(conversation)[-1]
    return session_time(conversation[f"session_{last}_date_time"]) + timedelta(days=1)


def evidence_ids(raw: Iterable[str]) -> list[str]:
    """Evidence as canonical 'D<session>:<turn>' ids; tolerates 'D:11:26' and 'D8:6; D9:17'."""
    found = []
    for entry in raw:
        for token in re.split(r"[;,\s]+", entry.replace("(", "").replace(")", "")):
            if m := _DIA.fullmatch(token.strip()):
                found.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return found


def gold(samples: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[int, set[str]]]:
    """Scorable questions: those with evidence that names turns of their conversation."""
    out = {}
    for sample in samples:
        known = {t["dia_id"] for _, turns in sessions(sample["conversation"]) for t in turns}
        for i, qa in enumerate(sample["qa"]):
            evidence = set(evidence_ids(qa.get("evidence", []))) & known
            if evidence:
                out[(sample["sample_id"], i)] = (int(qa["category"]), evidence)
    return out


BACKED_TITLE = f"text-backed (a memory's text holds {BACKED_SHARE:.0%} of the evidence turn's content words):"
TurnStems = Mapping[tuple[str, str], set[str]]


def turn_stems(samples: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """Every turn's content stems by (sample_id, dia_id): what a memory's text must hold to back that turn.

    The speaker's name is left out (every exchange of theirs holds it); an image's caption counts.
    """
    return {
        (sample["sample_id"], t["dia_id"]): stems(f"{t['text']} {t.get('blip_caption') or ''}")
        for sample in samples
        for _, turns in sessions(sample["conversation"])
        for t in turns
    }


@lru_cache(maxsize=1 << 16)
def _text_stems(text: str) -> frozenset[str]:
    return frozenset(stems(text))


def _backs(memory: Mapping[str, Any], wanted: set[str]) -> bool:
    """Whether the memory's text holds at least BACKED_SHARE of a turn's stems (a turn without any: provenance rules)."""
    return not wanted or len(wanted & _text_stems(memory.get("text", ""))) >= BACKED_SHARE * len(wanted)


def _covered(sample_id: str, memories: list[dict[str, Any]], backing: TurnStems | None) -> set[str]:
    if backing is None:
        return {d for memory in memories for d in memory["source_dia_ids"]}
    return {
        d for memory in memories for d in memory["source_dia_ids"] if _backs(memory, backing.get((sample_id, d), set()))
    }


def recall_at_k(
    results: list[dict[str, Any]],
    answers: dict[tuple[str, int], tuple[int, set[str]]],
    backing: TurnStems | None = None,
) -> dict[str, dict[str, float]]:
    """Mean share of evidence turns covered by the top k memories, by category and overall.

    A memory covers the turns its provenance names. An episode names every
    turn of the stretch it summarizes, but ~75 tokens cannot hold them all,
    so provenance alone credits an episode for facts its text left out
    (boosting episodes for list-like questions raised held-out multi-hop
    R@10 by 3 points on provenance while the turns actually in the texts
    fell). With `backing` (`turn_stems`) a memory covers an evidence turn
    only if its text also holds half that turn's content stems: the
    text-backed figure, printed beside the reference scorer's.
    """
    per_category: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in results:
        key = (line["sample_id"], line["qa_index"])
        if key not in answers:
            continue
        category, evidence = answers[key]
        for k in KS:
            covered = _covered(line["sample_id"], line["retrieved"][:k], backing)
            per_category[category][k].append(len(evidence & covered) / len(evidence))

    def row(categories: list[int]) -> dict[str, float]:
        n = sum(len(per_category[c][1]) for c in categories)
        figures = {f"R@{k}": 100 * sum(sum(per_category[c][k]) for c in categories) / n for k in KS} if n else {}
        return {"n": n, **figures}

    table = {CATEGORIES[c]: row([c]) for c in (4, 1, 2, 3, 5)}
    table["overall 1-4"] = row([1, 2, 3, 4])
    table["overall 1-5"] = row([1, 2, 3, 4, 5])
    return table


def format_table(table: dict[str, dict[str, float]]) -> str:
    lines = [f"{'category':<14}{'n':>6}" + "".join(f"{'R@' + str(k):>9}" for k in KS)]
    for name, row in table.items():
        if row["n"]:
            lines.append(f"{name:<14}{row['n']:>6}" + "".join(f"{row[f'R@{k}']:>9.1f}" for k in KS))
    return "\n".join(lines)


def retrieved(memory: dict[str, Any]) -> dict[str, Any]:
    dia_ids = [m["dia_id"] for m in memory["source"]["metadata"] if "dia_id" in m]
    return {
        "source_dia_ids": dia_ids,
        "text": memory["text"],
        "tokens": count_tokens(memory["text"]),
        "type": memory["type"],
        "provenance": len(memory["source"]["event_ids"]),
    }


TOKEN_BUDGET = 1000


def within_tokens(memories: list[dict[str, Any]], budget: int = TOKEN_BUDGET) -> list[dict[str, Any]]:
    """The returned memories, in order, while their texts together fit in `budget` tokens."""
    kept, used = [], 0
    for memory in memories:
        used += memory["tokens"]
        if used > budget:
            break
        kept.append(memory)
    return kept


def size_fair(
    results: list[dict[str, Any]], answers: dict[tuple[str, int], tuple[int, set[str]]], k: int = 10
) -> dict[str, float]:
    """Figures a gain from larger memories alone cannot fake (overall, categories 1-5).

    `R@1000tok`: evidence covered by the memories that fit in the first
    1,000 tokens of the answer; `provenance@10`: the mean number of source
    events per memory in the top k (raw turns: 1; an episode: many).
    """
    covered: list[float] = []
    provenance: list[int] = []
    for line in results:
        key = (line["sample_id"], line["qa_index"])
        if key not in answers:
            continue
        evidence = answers[key][1]
        seen = {d for memory in within_tokens(line["retrieved"]) for d in memory["source_dia_ids"]}
        covered.append(len(evidence & seen) / len(evidence))
        provenance.extend(m.get("provenance", len(m["source_dia_ids"])) for m in line["retrieved"][:k])
    return {
        f"R@{TOKEN_BUDGET}tok": 100 * sum(covered) / len(covered) if covered else 0.0,
        f"provenance@{k}": sum(provenance) / len(provenance) if provenance else 0.0,
    }


def recall_settings(settings: Settings) -> dict[str, Any]:
    """The settings recall ran with (every recall_* knob and the profile threshold), as the bench prints them."""
    names = [n for n in Settings.model_fields if n.startswith("recall_")] + ["profile_min_similarity"]
    return {n: getattr(settings, n) for n in names}


def findable(
    results: list[dict[str, Any]], answers: dict[tuple[str, int], tuple[int, set[str]]], k: int = 10
) -> dict[str, dict[str, int]]:
    """Per synthesized type: questions with one in their top k, and those where it covers an evidence turn."""
    out = {t: {"in_top": 0, "covers_evidence": 0} for t in ("pattern", "semantic")}
    for line in results:
        key = (line["sample_id"], line["qa_index"])
        if key not in answers:
            continue
        evidence = answers[key][1]
        for type_, figures in out.items():
            found = [m for m in line["retrieved"][:k] if m.get("type") == type_]
            figures["in_top"] += bool(found)
            figures["covers_evidence"] += any(evidence & set(m["source_dia_ids"]) for m in found)
    return out


async def ask_all(
    base_url: str, samples: list[dict[str, Any]], users: dict[str, str], headers: Mapping[str, str]
) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=base_url, timeout=60, headers=dict(headers)) as client:
        for sample in samples:
            for i, qa in enumerate(sample["qa"]):
                body = {
                    "tenant_id": TENANT,
                    "user_id": users[sample["sample_id"]],
                    "query": qa["question"],
                    "top_k": 50,
                    "token_budget": 64_000,  # the API maximum: rank decides, not the budget
                    # Questions are independent probes: one must not boost what the next one finds.
                    "record_access": False,
                }
                response = await client.post("/v1/recall", json=body)
                response.raise_for_status()
                memories = response.json()["memories"]
                lines.append(
                    {"sample_id": sample["sample_id"], "qa_index": i, "retrieved": [retrieved(m) for m in memories]}
                )
    return lines


async def memory_counts(dsn: str, users: Iterable[str]) -> dict[str, dict[str, int]]:
    """Each user's active memories by type, with totals; compressed episodes (in a pattern) counted apart too.

    `recallable` is what default recall can return: active and not compressed.
    """
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(
            """SELECT user_id, type, count(*), count(*) FILTER (WHERE compressed) FROM memories
               WHERE tenant_id = %s AND user_id = ANY(%s) AND status = 'active' GROUP BY user_id, type""",
            (TENANT, list(users)),
        )
        rows = await cur.fetchall()
    counts: dict[str, dict[str, int]] = {u: {} for u in users}
    for user, type_, n, compressed in rows:
        by_type = counts[user]
        by_type[type_] = n
        by_type["total"] = by_type.get("total", 0) + n
        by_type["compressed"] = by_type.get("compressed", 0) + compressed
    for by_type in counts.values():
        by_type.setdefault("total", 0)
        by_type.setdefault("compressed", 0)
        by_type["recallable"] = by_type["total"] - by_type["compressed"]
    return counts


async def stored_episodes(dsn: str, users: Iterable[str]) -> dict[str, list[Episode]]:
    """Each user's active episodes with their provenance, as Postgres holds them now."""
    users = list(users)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(
            """SELECT user_id, text, provenance FROM memories
               WHERE tenant_id = %s AND user_id = ANY(%s) AND type = 'episode' AND status = 'active'""",
            (TENANT, users),
        )
        rows = await cur.fetchall()
    out: dict[str, list[Episode]] = {u: [] for u in users}
    for user, text, provenance in rows:
        out[user].append(Episode(text, provenance))
    return out


def episodes_path(out: Path) -> Path:
    """Where the per-session episodes go: `bench-results/locomo.jsonl` -> `bench-results/locomo-episodes.jsonl`."""
    return out.with_name(f"{out.stem}-episodes.jsonl")


def episode_coverage(
    samples: list[dict[str, Any]], episodes: Mapping[str, list[Episode]]
) -> tuple[list[dict[str, Any]], dict[str, float | int]]:
    """The per-session episode lines of every conversation, and their coverage of the reference summaries."""
    lines = [
        line
        for sample in samples
        for line in session_lines(
            sample["sample_id"],
            [n for n, _ in sessions(sample["conversation"])],
            episodes.get(sample["sample_id"], []),
        )
    ]
    references = {(s["sample_id"], n): text for s in samples for n, text in reference_summaries(s).items()}
    every = [e for sample in samples for e in episodes.get(sample["sample_id"], [])]
    return lines, coverage_summary(lines, references, every)


async def maintain(
    base_url: str, settings: Settings, samples: list[dict[str, Any]], users: dict[str, str], headers: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """One maintenance pass per conversation's user, as of a day after its last session; figures per conversation."""
    before = await memory_counts(settings.pg_dsn, users.values())
    passes = {}
    for sample in samples:
        user = users[sample["sample_id"]]
        now = maintenance_time(sample)
        started = time.perf_counter()
        counts = await maintain_once(settings, now, TENANT, user)
        passes[sample["sample_id"]] = {
            "now": now.isoformat(),
            "pass": {k: v for k, v in sorted(counts.items())},
            "pass_seconds": round(time.perf_counter() - started, 3),
        }
    # The pass's changes reach the index through memory.changes: recall after it waits for them.
    async with httpx.AsyncClient(base_url=base_url, timeout=30, headers=dict(headers)) as client:
        drained = await wait_drained(client, 300)
    after = await memory_counts(settings.pg_dsn, users.values())
    return {
        sample_id: {
            "user": users[sample_id],
            **figures,
            "drained": drained,
            "before": before[users[sample_id]],
            "after": after[users[sample_id]],
        }
        for sample_id, figures in passes.items()
    }


def format_growth(per_user: dict[str, dict[str, Any]]) -> str:
    """Active memories per conversation before → after maintenance, by type, and what the pass did."""
    types = sorted({t for f in per_user.values() for t in [*f["before"], *f["after"]]} - {"total", "compressed"})
    types = [t for t in types if t != "recallable"] + ["total", "compressed", "recallable"]
    lines = []
    for sample_id, f in per_user.items():
        did = {k: v for k, v in f["pass"].items() if k != "users"}
        lines.append(
            f"{sample_id} (maintenance as of {f['now'][:10]}, {f['pass_seconds']:.2f} s): {did or 'no effect'}"
        )
        lines.extend(
            f"  {t:<12}{f['before'].get(t, 0):>6} -> {f['after'].get(t, 0):<6}"
            for t in types
            if f["before"].get(t, 0) or f["after"].get(t, 0) or t in ("total", "recallable")
        )
    return "\n".join(lines)


async def run(
    base_url: str,
    bootstrap: str,
    samples: list[dict[str, Any]],
    settings: Settings,
    headers: Mapping[str, str],
    stack_env: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, list[Episode]]]:
    """Replay, ask, maintain, ask again: the lines before and after maintenance, the run's figures, and
    each conversation's episodes as the replay left them (by sample id).

    `headers` carry the API key of every HTTP request (auth is on by default).
    With `stack_env` (a stack of the bench's own) it also rebuilds a generation
    from the archive the replay made, and reports its rate beside live ingest's.
    """
    run_id = uuid.uuid4().hex[:6]
    users = {s["sample_id"]: f"{s['sample_id']}-{run_id}" for s in samples}
    events = [e for s in samples for e in to_events(s, users[s["sample_id"]])]
    stats: dict[str, Any] = {}
    await replay(settings, events, stats)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, headers=dict(headers)) as client:
        stats["drained"] = await wait_drained(client, 300)
    by_user = await stored_episodes(settings.pg_dsn, users.values())
    episodes = {sample_id: by_user[user] for sample_id, user in users.items()}
    if stack_env is not None:
        stats["generation_rebuild"] = {}
        await generation_bench.rebuild(
            stack_env, settings.pg_dsn, stats.get("turns_per_s"), stats["generation_rebuild"]
        )
    started = time.perf_counter()
    lines = await ask_all(base_url, samples, users, headers)
    stats["questions"] = len(lines)
    stats["ask_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    stats["maintenance"] = await maintain(base_url, settings, samples, users, headers)
    stats["maintenance_seconds"] = time.perf_counter() - started
    after = await ask_all(base_url, samples, users, headers)
    return lines, after, stats, episodes


def format_fair(fair: dict[str, float]) -> str:
    return "  ".join(f"{name} {value:.1f}" if "R@" in name else f"{name} {value:.2f}" for name, value in fair.items())


def setting_env(pairs: list[str]) -> dict[str, str]:
    """`name=value` pairs as the stack's environment (MEMSTREAM_NAME); an unknown setting name is an error."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name.strip().lower() not in Settings.model_fields:
            raise SystemExit(f"--set {pair!r}: not NAME=VALUE with a known setting name")
        env[f"MEMSTREAM_{name.strip().upper()}"] = value
    return env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=Path("bench-results/locomo.jsonl"))
    parser.add_argument("--base-url", help="use a running stack instead of starting one")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--api-key", default="", help="a key of the running stack (with --base-url)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the bench's own stack, e.g. recall_context_weight=0 (MEMSTREAM_RECALL_CONTEXT_WEIGHT)",
    )
    args = parser.parse_args()
    samples = json.loads(args.data.read_text())
    started = time.perf_counter()
    if args.base_url:
        settings = Settings(kafka_bootstrap=args.bootstrap)  # Postgres from MEMSTREAM_PG_DSN, as the stack's
        headers = {"authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        ran_with = recall_settings(settings)  # as far as this process can know: the stack's own environment rules
        lines, after, stats, episodes = asyncio.run(run(args.base_url, args.bootstrap, samples, settings, headers))
    else:
        env = {"MEMSTREAM_LAG_REFRESH_SECONDS": "0.5", **setting_env(args.set)}
        with tempfile.TemporaryDirectory() as tmp, embedded_stack(Path(tmp), extra_env=env) as stack:
            settings = stack_settings(stack)
            ran_with = recall_settings(settings)
            lines, after, stats, episodes = asyncio.run(
                run(stack.base_url, stack.bootstrap, samples, settings, stack.headers, stack.env)
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    after_out = args.out.with_suffix(".after-maintenance.jsonl")
    after_out.write_text("".join(json.dumps(line) + "\n" for line in after))
    episode_lines, coverage = episode_coverage(samples, episodes)
    episodes_out = episodes_path(args.out)
    episodes_out.write_text("".join(json.dumps(line) + "\n" for line in episode_lines))
    answers = gold(samples)
    table, table_after = recall_at_k(lines, answers), recall_at_k(after, answers)
    backing = turn_stems(samples)
    backed, backed_after = recall_at_k(lines, answers, backing), recall_at_k(after, answers, backing)
    fair, fair_after = size_fair(lines, answers), size_fair(after, answers)
    stats["total_seconds"] = time.perf_counter() - started
    synthesized = findable(after, answers)
    summary = {
        "settings": ran_with,
        "stats": stats,
        "recall": table,
        "recall_text_backed": backed,
        "size_fair": fair,
        "episode_coverage": coverage,
        "recall_after_maintenance": table_after,
        "recall_text_backed_after_maintenance": backed_after,
        "size_fair_after_maintenance": fair_after,
        "synthesized_in_top_10_after_maintenance": synthesized,
    }
    args.out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2, default=str))
    growth = stats.pop("maintenance")
    print("settings:", json.dumps(ran_with, default=str))
    print(json.dumps(stats, default=str))
    print(format_table(table))
    print(BACKED_TITLE)
    print(format_table(backed))
    print(format_fair(fair))
    print(format_coverage(coverage))
    print("\nactive memories per user, before -> after one maintenance pass:")
    print(format_growth(growth))
    print("\nrecall after maintenance (same questions, same scorer):")
    print(format_table(table_after))
    print(BACKED_TITLE)
    print(format_table(backed_after))
    print(format_fair(fair_after))
    for type_, figures in synthesized.items():
        print(
            f"{type_} memories in a question's top 10 after maintenance: {figures['in_top']} questions, "
            f"covering an evidence turn in {figures['covers_evidence']}"
        )
    print(f"results: {args.out}  (one JSON line per question: score it independently)")
    print(f"episodes per session: {episodes_out}")


if __name__ == "__main__":
    main()
