"""Each package exports the names of DESIGN §3.1 and nothing else; every name resolves."""

import importlib
import subprocess
import sys

import pytest

EXPECTED = {
    "bot": [
        "Agent",
        "AgentContext",
        "AgentInput",
        "AgentMetadata",
        "AgentResult",
        "BeamError",
        "ChunkFrame",
        "ContentPart",
        "DoneFrame",
        "ErrorFrame",
        "Frame",
        "InMemoryStore",
        "InvokeRequest",
        "MemoryStore",
        "Modality",
        "ModelConfig",
        "Note",
        "PendingCall",
        "PlaceholderFrame",
        "ResultStatus",
        "RiverBeam",
        "ThinkingFrame",
        "Tool",
        "ToolCallRecord",
        "ToolFrame",
        "ToolSpec",
        "Usage",
        "clients",
        "json_params",
        "runner",
    ],
    "bot.clients": [
        "Completion",
        "CompletionClient",
        "EchoClient",
        "Message",
        "OpenAiCompatible",
        "ScriptedClient",
        "StreamingCompletionClient",
        "TextDelta",
        "ToolCall",
    ],
    "bot.runner": ["CallDecision", "Hooks", "RunState", "ToolLoopAgent"],
    "sandbox": ["SandboxRoot", "WorkingTree", "sandbox_tools"],
    "skills": ["Skill", "builtin_skills", "load_skill", "skill_by_name"],
}


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_the_public_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == EXPECTED[package]
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_the_error_module_does_not_load_the_service() -> None:
    """The tool server in a container imports ``bot.core.errors`` without httpx or the runner."""
    heavy = ("httpx", "bot.runner", "bot.agents.host", "jinja2")
    imports = "import sys, bot.core.errors, bot.core.tools"
    probe = f"{imports}; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
