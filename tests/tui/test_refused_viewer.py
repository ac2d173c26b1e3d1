"""A viewer that a hub with CURVE keys refuses is told so on the dashboard: it waited for a
snapshot that would never come, its header saying only "waiting for the hub's snapshot… (is the
hub running? ...)", for as long as it stayed open."""

from __future__ import annotations

import pytest
import zmq
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
        ("none", "it has CURVE keys and this viewer has none (--curve-dir DIR or PARDASH_CURVE_DIR"),
        ("other", "this viewer's server.key is not this hub's (copy server.key from the hub's keys folder)"),
        ("stranger", "it does not admit this viewer's client key (`pardash keys --dir HUB_KEYS --viewer NAME` admits a viewer to watch: its key in the hub folder's authorized_viewers/; a key in authorized_clients/ may publish too)"),
    ],
)
async def test_a_refused_viewer_is_told_the_hub_refuses_it(curve_hub, tmp_path, whose, said):
    hub, keys = curve_hub
    if whose == "other":
        security.make_keys(tmp_path / "other-keys")  # another hub's folder: keys this hub does not take
    if whose == "stranger":  # a key pair the hub never admitted, with the hub's own public key
        public, secret = zmq.curve_keypair()
        curve = security.ClientKeys(public, secret, security.load_client_keys(keys).server_public)
    else:
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


async def test_a_viewer_with_keys_is_told_the_hub_may_have_none(tmp_path):
    # Keys against a hub without any read "this viewer's server.key is not this hub's (copy
    # server.key from the hub's keys folder)": a hub with no keys has no server.key to copy.
    # (The two sides' mechanisms differing is a protocol error of its own: said alone.)
    security.make_keys(tmp_path / "keys")
    with serving(Hub(run_id=RUN, log_path=None)) as hub:
        client = HubClient(hub.updates_endpoint, hub.snapshot_endpoint, run_id=RUN, curve=str(tmp_path / "keys"))
        app = make_app(client)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "the hub refuses this viewer" in _header(app))
            said = _header(app)
            assert "refuses this viewer: the hub has no CURVE keys (this viewer then goes without: no --curve-dir DIR or PARDASH_CURVE_DIR)" in said
            assert "server.key" not in said
