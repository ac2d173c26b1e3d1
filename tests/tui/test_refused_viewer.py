"""A viewer that a hub with CURVE keys refuses is told so on the dashboard: it waited for a
snapshot that would never come, its header saying only "waiting for the hub's snapshot… (is the
hub running? ...)", for as long as it stayed open."""

from __future__ import annotations

import pytest
from helpers import serving
from tui_helpers import until, widget_text

from pardash.telemetry import security
from pardash.telemetry.client import HubClient
from pardash.telemetry.hub import Hub
from pardash.tui.app import make_app
from pardash.tui.widgets.run_header import RunHeader

RUN = "tui-refused"
SIZE = (120, 30)


@pytest.fixture
def curve_hub(tmp_path):
    keys = tmp_path / "hub-keys"
    security.make_keys(keys)
    hub = Hub(run_id=RUN, log_path=None, curve=str(keys))
    with serving(hub):
        yield hub, keys


def _header(app) -> str:
    return widget_text(app.screen.query_one(RunHeader))


@pytest.mark.parametrize(
    "whose, said",
    [
        ("none", "it has CURVE keys and this viewer has none"),
        ("other", "it does not take this viewer's keys"),
    ],
)
async def test_a_refused_viewer_is_told_the_hub_refuses_it(curve_hub, tmp_path, whose, said):
    hub, _ = curve_hub
    if whose == "other":
        security.make_keys(tmp_path / "other-keys")  # another hub's folder: keys this hub does not take
    curve = False if whose == "none" else str(tmp_path / "other-keys")
    client = HubClient(hub.updates_endpoint, hub.snapshot_endpoint, run_id=RUN, curve=curve)
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "the hub refuses this viewer" in _header(app))
        assert said in _header(app)
        assert not client.synced


async def test_a_viewer_with_the_hubs_keys_is_not_called_refused(curve_hub):
    hub, keys = curve_hub
    client = HubClient(hub.updates_endpoint, hub.snapshot_endpoint, run_id=RUN, curve=str(keys))
    app = make_app(client)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: client.synced)
        assert client.refused == ""
        assert "refuses" not in _header(app)
