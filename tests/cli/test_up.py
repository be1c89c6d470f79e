"""``riverbeam up``: starts what is missing, reuses what runs, stops what it started on
Ctrl-C and leaves nothing behind. Real Redis, real Celery worker and beat processes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import redis

from harness.redis_server import running_redis
from harness.workers import free_port
from tests.cli.kit import Background, alive, assert_all_gone, environment, started_pids

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, redis_url: str) -> Path:
    config = tmp_path / "riverbeam.toml"
    config.write_text(
        f'redis_url = "{redis_url}"\n\n'
        "[workspaces]\n"
        f'root = "{tmp_path / "workspaces"}"\n'
        f'mirrors = "{tmp_path / "mirrors"}"\n\n'
        "[api]\n"
        f"port = {free_port()}\n"
    )
    return config


def _setting(port: int, name: str) -> object:
    with redis.Redis(port=port) as client:
        return client.config_get(name)[name]


def test_up_starts_redis_worker_and_beat_and_stops_them_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    config = _config(tmp_path, f"redis://127.0.0.1:{port}/0")
    env = environment(tmp_path / "state")
    with Background(["--config", str(config), "up", "--concurrency", "1"], env) as up:
        output = up.wait_for("ready on")
        assert f"started  redis at 127.0.0.1:{port}" in output
        assert "started  worker riverbeam-worker-" in output
        assert "started  beat riverbeam-beat-" in output
        assert "started  api and web pages at http://127.0.0.1:" in output
        pids = started_pids(output)
        assert len(pids) == 4 and all(alive(pid) for pid in pids)
        # Redis keeps its data under the state directory, with the append-only file on.
        assert _setting(port, "appendonly") == "yes"
        assert _setting(port, "dir") == str(tmp_path / "state" / f"redis-{port}")

        with Background(["--config", str(config), "up"], env) as again:
            assert again.finish() == 0
        for line in (f"reusing  redis at 127.0.0.1:{port}", "reusing  worker riverbeam-worker-",
                     "reusing  beat riverbeam-beat-", "reusing  api at http://127.0.0.1:",
                     "everything already runs"):  # fmt: skip
            assert line in again.output, again.output
        assert "started" not in again.output

        # Tokens reload live (SIGHUP): a new one leaves the worker and beat this config's own.
        with config.open("a") as toml:
            toml.write(f'\n[[api.tokens]]\nname = "new"\nrole = "ci"\nsha256 = "{"0" * 64}"\n')
        with Background(["--config", str(config), "up"], env) as tokens_changed:
            assert tokens_changed.finish() == 0
        assert "everything already runs" in tokens_changed.output, tokens_changed.output
        assert "another configuration" not in tokens_changed.output, tokens_changed.output

        up.process.send_signal(signal.SIGINT)
        assert up.finish() == 0, up.output
    stops = ("stopping: SIGINT received", "stopped  api", "stopped  beat", "stopped  worker")
    for line in (*stops, "stopped  redis"):
        assert line in up.output, up.output
    assert_all_gone(pids)


def test_up_reuses_a_running_redis_and_leaves_it_running(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    with running_redis(tmp_path / "redis") as server:
        config = _config(tmp_path, server.url)
        with Background(["--config", str(config), "up"], environment(tmp_path / "state")) as up:
            output = up.wait_for("ready on")
            assert f"reusing  redis at 127.0.0.1:{server.port}" in output
            pids = started_pids(output)
            assert len(pids) == 3
            up.process.send_signal(signal.SIGTERM)
            assert up.finish() == 0, up.output
        assert "stopped  redis" not in up.output
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
        assert_all_gone(pids)


def test_up_says_what_is_wrong_when_redis_is_elsewhere_and_down(tmp_path: Path) -> None:
    config = _config(tmp_path, f"redis://192.0.2.1:{free_port()}/0")
    with Background(["--config", str(config), "up"], environment(tmp_path / "state")) as up:
        assert up.finish() == 2
    assert "riverbeam: BEM-504: nothing answers at 192.0.2.1:" in up.output
    assert "Traceback" not in up.output
