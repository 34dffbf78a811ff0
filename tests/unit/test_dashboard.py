import json
from collections import Counter

from ops import dashboard

COMMITTED = json.loads(dashboard.OUTPUT.read_text())


def test_committed_json_matches_the_panel_definitions() -> None:
    assert dashboard.OUTPUT.read_text() == dashboard.dumps(), "run `python -m ops.dashboard`"


def test_panel_ids_are_unique_and_every_panel_has_a_datasource() -> None:
    ids = Counter(p["id"] for p in COMMITTED["panels"])
    assert ids
    assert all(n == 1 for n in ids.values()), ids
    for panel in COMMITTED["panels"]:
        assert panel["datasource"]["uid"], panel["title"]
        assert panel["targets"], panel["title"]


def test_every_target_has_an_expression_a_datasource_and_a_unique_ref() -> None:
    for panel in COMMITTED["panels"]:
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"]["uid"] == panel["datasource"]["uid"]


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in COMMITTED["panels"]:
        g = panel["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine
        assert g["x"] + g["w"] <= 24


def test_the_panels_the_operators_asked_for_exist() -> None:
    titles = " | ".join(p["title"].lower() for p in COMMITTED["panels"])
    for needed in (
        "ingest",
        "stage throughput",
        "p95",
        "lag",
        "freshness",
        "decisions",
        "dlq",
        "store",
        "recall latency",
        "memories",
    ):
        assert needed in titles, needed


def test_the_provisioned_datasource_is_the_one_panels_use() -> None:
    import yaml

    provisioning = dashboard.OUTPUT.parent.parent / "provisioning" / "datasources" / "prometheus.yml"
    sources = yaml.safe_load(provisioning.read_text())["datasources"]
    assert dashboard.DATASOURCE["uid"] in {s["uid"] for s in sources}
