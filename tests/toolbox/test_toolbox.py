"""The MCP toolbox against real server processes: server-everything (npm) and a tiny stdio
server written here whose tools misbehave on request. No Redis, no container: the toolbox
as a job segment uses it (``bot.jobs.toolbox``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from bot.config import McpSettings
from bot.core.errors import BeamError
from bot.core.input import AgentInput
from bot.core.tools import Tool
from bot.jobs.toolbox import Toolbox
from bot.runner.interrupts import RunAborted
from harness.mcp_servers import everything, tiny, tiny_script
from harness.stack import wait_until
from harness.workers import free_port

CANARY = "mcp-leak-canary-4f1c"
ASK = AgentInput.of_text("a call")


def settings(*servers: Mapping[str, Any]) -> McpSettings:
    return McpSettings.model_validate({"servers": list(servers)})


def box_of(config: Mapping[str, Any], tools: Sequence[str] | None = None) -> Toolbox:
    wanted = tuple(tools if tools is not None else config["tools"])
    return Toolbox(settings(config), {config["name"]: wanted})


def named(box: Toolbox, name: str) -> Tool:
    return next(tool for tool in box.tools if tool.spec().name == name)


async def call(box: Toolbox, name: str, **args: Any) -> Any:
    return await named(box, name).invoke(args, ASK)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; /proc says which.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"


def test_server_everything_offers_exactly_the_allowlisted_tools_with_their_schemas() -> None:
    config = everything(tools=["echo", "get-sum"], confirm_required=["get-sum"])

    async def run() -> tuple[list[Any], Any, Any]:
        async with box_of(config) as box:
            specs = [tool.spec() for tool in box.tools]
            echoed = await call(box, "everything__echo", message="hello")
            summed = await call(box, "everything__get-sum", a=2, b=3)
            return specs, echoed, summed

    specs, echoed, summed = asyncio.run(run())
    # get-env, get-tiny-image and the rest of its tools are not in the allowlist: never offered.
    assert [spec.name for spec in specs] == ["everything__echo", "everything__get-sum"]
    assert [spec.confirm_required for spec in specs] == [False, True]
    assert specs[1].parameters["properties"].keys() >= {"a", "b"}
    assert echoed == {"content": [{"type": "text", "text": "Echo: hello"}]}
    assert summed["content"][0]["text"] == "The sum of 2 and 3 is 5."


def test_the_server_sees_only_its_configured_environment_never_the_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_PASSWORD", CANARY)
    monkeypatch.setenv("RIVERBEAM_MODEL__API_KEY", CANARY)
    config = everything(tools=["get-env"], env={"GREETING": "hello"})

    async def run() -> Any:
        async with box_of(config) as box:
            return await call(box, "everything__get-env")

    shown = asyncio.run(run())["content"][0]["text"]
    env = json.loads(shown)
    assert CANARY not in shown
    assert env["GREETING"] == "hello"
    assert "REDIS_PASSWORD" not in env and "RIVERBEAM_MODEL__API_KEY" not in env
    assert Path(env["HOME"]).name.startswith("riverbeam-mcp-everything-")
    assert not Path(env["HOME"]).exists()  # removed with the server


def test_the_server_runs_in_an_empty_directory_of_its_own_and_is_gone_after(
    tmp_path: Path,
) -> None:
    config = tiny(tmp_path, tools=["where"])

    async def run() -> Any:
        async with box_of(config) as box:
            return json.loads((await call(box, "tiny__where"))["content"][0]["text"])

    where = asyncio.run(run())
    assert where["cwd"] != os.getcwd() and not Path(where["cwd"]).is_relative_to(tmp_path)
    # Nothing of the toolbox's (no pid, no standard error) and no job files: for the server
    # alone, the worker's user's only.
    assert where["entries"] == []
    assert where["mode"] == 0o700 and where["owner"] == os.getuid()
    assert where["env"]["HOME"] == where["cwd"]
    assert not alive(where["pid"])
    assert not Path(where["cwd"]).exists()


def test_a_server_that_cannot_start_is_bem_721_with_its_standard_error(tmp_path: Path) -> None:
    missing = {"name": "gone", "command": str(tmp_path / "no-such-server"), "tools": ["x"]}
    with pytest.raises(BeamError) as raised:
        asyncio.run(box_of(missing).__aenter__())
    assert raised.value.code == "BEM-721"
    assert "cannot run" in raised.value.message and "no-such-server" in raised.value.message


def test_a_url_that_does_not_answer_is_bem_721() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    down = {"name": "remote", "url": url, "tools": ["x"], "startup_timeout_seconds": 5}
    with pytest.raises(BeamError) as raised:
        asyncio.run(box_of(down).__aenter__())
    assert raised.value.code == "BEM-721"


def test_a_tool_the_server_does_not_offer_is_bem_726(tmp_path: Path) -> None:
    config = tiny(tmp_path, tools=["where", "teleport"])
    with pytest.raises(BeamError) as raised:
        asyncio.run(box_of(config).__aenter__())
    assert raised.value.code == "BEM-726" and "'teleport'" in raised.value.message


def test_a_server_dying_mid_call_aborts_the_run_with_bem_722(tmp_path: Path) -> None:
    config = tiny(tmp_path, tools=["where", "die"])

    async def run() -> int:
        async with box_of(config) as box:
            pid = json.loads((await call(box, "tiny__where"))["content"][0]["text"])["pid"]
            with pytest.raises(RunAborted) as aborted:
                await call(box, "tiny__die")
            assert aborted.value.error.code == "BEM-722"
            assert "tiny server starting" in aborted.value.error.message  # its stderr
            return int(pid)

    assert not alive(asyncio.run(run()))


def test_a_call_past_its_timeout_is_bem_723_and_the_server_still_answers(
    tmp_path: Path,
) -> None:
    config = tiny(tmp_path, tools=["nap", "big"], call_timeout_seconds=0.5)

    async def run() -> Any:
        async with box_of(config) as box:
            with pytest.raises(BeamError) as raised:
                await call(box, "tiny__nap", seconds=30)
            assert raised.value.code == "BEM-723"
            return await call(box, "tiny__big", size=3)

    assert asyncio.run(run())["content"][0]["text"] == "xxx"


def test_an_output_over_the_cap_reaches_the_model_cut_and_flagged(tmp_path: Path) -> None:
    config = tiny(tmp_path, tools=["big"], max_output_bytes=1000)

    async def run() -> tuple[Any, Any]:
        async with box_of(config) as box:
            return await call(box, "tiny__big", size=400), await call(box, "tiny__big", size=5000)

    small, large = asyncio.run(run())
    assert small["content"][0]["text"] == "x" * 400
    assert large["truncated"] is True and large["max_output_bytes"] == 1000
    assert large["output_bytes"] > 5000
    assert len(large["output_start"].encode()) == 1000


def test_a_tool_error_is_bem_724_for_the_model(tmp_path: Path) -> None:
    config = tiny(tmp_path, tools=["fail"])

    async def run() -> None:
        async with box_of(config) as box:
            await call(box, "tiny__fail")

    with pytest.raises(BeamError) as raised:
        asyncio.run(run())
    assert raised.value.code == "BEM-724" and "Error executing tool fail" in raised.value.message


def test_a_cancelled_segment_stops_its_server(tmp_path: Path) -> None:
    config = tiny(tmp_path, tools=["where", "nap"])
    pids: list[int] = []

    async def segment() -> None:
        async with box_of(config) as box:
            pids.append(json.loads((await call(box, "tiny__where"))["content"][0]["text"])["pid"])
            await call(box, "tiny__nap", seconds=30)

    async def run() -> None:
        task = asyncio.create_task(segment())
        while not pids:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert not alive(pids[0])


def test_a_time_limit_inside_the_segment_stops_its_server(tmp_path: Path) -> None:
    """Celery's soft time limit raises wherever the worker is, here inside a call."""
    config = tiny(tmp_path, tools=["where"])
    pids: list[int] = []

    async def segment() -> None:
        async with box_of(config) as box:
            pids.append(json.loads((await call(box, "tiny__where"))["content"][0]["text"])["pid"])
            raise SoftTimeLimitExceeded()

    with pytest.raises(SoftTimeLimitExceeded):
        asyncio.run(segment())
    assert not alive(pids[0])


@pytest.mark.parametrize("stop", ["segment end", "clean-up only"])
def test_a_servers_helpers_die_with_it(tmp_path: Path, stop: str) -> None:
    """A server that started a helper process: the helper is in the server's process group,
    which is killed whole when the segment ends, or by the executor's clean-up alone (a
    segment cut short before the toolbox's own stop ran)."""
    config = tiny(tmp_path, tools=["spawn"])
    box = box_of(config)

    async def run() -> int:
        async with box:
            helper = int((await call(box, "tiny__spawn"))["content"][0]["text"])
            if stop == "clean-up only":
                box.kill_leftovers()
                wait_until(lambda: not alive(helper), 20, lambda: f"helper {helper} lives")
        return helper

    helper = asyncio.run(run())
    wait_until(lambda: not alive(helper), 20, lambda: f"helper {helper} outlived its server")


WORKER = """
import asyncio, json, sys
from bot.config import McpSettings
from bot.core.input import AgentInput
from bot.jobs.toolbox import Toolbox

config = json.loads(sys.argv[1])
settings = McpSettings.model_validate({"servers": [config]})
async def main():
    async with Toolbox(settings, {"tiny": ("where",)}) as box:
        where = await box.tools[0].invoke({}, AgentInput.of_text("x"))
        print(json.loads(where["content"][0]["text"])["pid"], flush=True)
        await asyncio.sleep(600)
asyncio.run(main())
"""


def test_a_killed_worker_takes_its_servers_with_it(tmp_path: Path) -> None:
    """A worker killed with SIGKILL runs no clean-up: the kernel ends its servers."""
    config = tiny(tmp_path, tools=["where"])
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(config)], stdout=subprocess.PIPE, text=True
    )
    assert worker.stdout is not None
    pid = int(worker.stdout.readline())
    assert alive(pid)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    worker.stdout.close()
    wait_until(lambda: not alive(pid), 20, lambda: f"MCP server {pid} outlived its worker")


FORGER = """
import asyncio, json, os, sys
from bot.config import McpSettings
from bot.core.input import AgentInput
from bot.jobs.toolbox import Toolbox

config, forged, stop = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
settings = McpSettings.model_validate({"servers": [config]})
ask = AgentInput.of_text("x")
async def main():
    box = Toolbox(settings, {"tiny": ("where", "spawn", "write")})
    async with box:
        tools = {tool.spec().name: tool for tool in box.tools}
        async def text(name, **args):
            return (await tools[name].invoke(args, ask))["content"][0]["text"]
        server = json.loads(await text("tiny__where"))["pid"]
        helper = int(await text("tiny__spawn"))
        pgid = str(os.getpgrp())
        for name in (".pid", "pid", ".stderr"):
            await text("tiny__write", path=name, text=forged.replace("WORKER", pgid))
        print(json.dumps({"server": server, "helper": helper}), flush=True)
        if stop == "clean-up only":
            box.kill_leftovers()
    print("survived", flush=True)
asyncio.run(main())
"""


@pytest.mark.parametrize("stop", ["segment end", "clean-up only"])
@pytest.mark.parametrize("forged", ["0", "WORKER", "VICTIM", "-1"])
def test_a_pid_file_forged_by_a_tool_chooses_nothing_the_worker_kills(
    tmp_path: Path, forged: str, stop: str
) -> None:
    """A file-writing tool of the server writes, where the model asks, a process group id
    into the server's directory: the worker's own group ("0", its pgid), a stranger's, or
    nonsense. The worker, the stranger and all else survive; the server's own group, with
    the helper it started, is still killed whole."""
    config = tiny(tmp_path, tools=["where", "spawn", "write"])
    victim = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    # The worker leads a session of its own: a kill of "its" group never reaches pytest.
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FORGER,
            json.dumps(config),
            forged.replace("VICTIM", str(victim.pid)),
            stop,
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    ran: dict[str, int] = {}
    try:
        output, _ = worker.communicate(timeout=120)
        ran = json.loads(output.splitlines()[0]) if output else {}
        assert worker.returncode == 0 and output.splitlines()[1:] == ["survived"], output
        assert victim.poll() is None
        group = (ran["server"], ran["helper"])
        wait_until(lambda: not any(map(alive, group)), 20, lambda: f"{group} (the server's) live")
    finally:
        for pid in ran.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        victim.kill()
        victim.wait()


def test_mcp_names_are_checked_when_the_configuration_is_read(tmp_path: Path) -> None:
    base = {"command": "x", "tools": ["t"]}
    for bad in (
        {"name": "a.b"},
        {"name": "a__b"},
        {"name": "Upper"},
        {"name": "ok", "url": "http://h/mcp"},
        {"name": "ok", "confirm_required": ["u"]},
        {"name": "ok", "tools": ["has.dot"]},
        {"name": "x" * 32 + "_" + "y" * 31, "tools": ["t" * 30]},
    ):
        with pytest.raises(ValidationError):
            settings(base | bad)
    with pytest.raises(ValidationError, match="not configured"):
        McpSettings.model_validate(
            {"servers": [base | {"name": "ok"}], "skills": {"author": ["other.t"]}}
        )
    with pytest.raises(ValidationError, match="not in the tools allowlist"):
        McpSettings.model_validate(
            {"servers": [base | {"name": "ok"}], "skills": {"author": ["ok.u"]}}
        )


def test_a_streamable_http_server_is_called_by_url(tmp_path: Path) -> None:
    port = free_port()
    served = subprocess.Popen(
        [sys.executable, str(tiny_script(tmp_path)), "http", str(port)],
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    try:
        remote = {
            "name": "tiny",
            "url": f"http://127.0.0.1:{port}/mcp",
            "headers": {"Authorization": "Bearer for-the-tiny-server"},
            "tools": ["big"],
            "max_output_bytes": 300,
        }

        async def run() -> tuple[Any, Any]:
            async with box_of(remote) as box:
                return await call(box, "tiny__big", size=3), await call(box, "tiny__big", size=900)

        wait_until(lambda: _answers(port), 30, lambda: "the tiny HTTP server did not start")
        small, large = asyncio.run(run())
    finally:
        served.terminate()
        served.wait()
    assert small["content"][0]["text"] == "xxx"
    assert large["truncated"] is True


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
