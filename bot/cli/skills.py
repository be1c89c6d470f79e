"""``riverbeam skills [NAME]``: the built-in skills, or one skill's allowlist and prompt."""

from __future__ import annotations

import argparse
from typing import Any


def add_skills_commands(commands: Any) -> None:
    skills = commands.add_parser("skills", help="list the built-in skills, or show one")
    skills.add_argument("name", nargs="?", help="a skill to show with its rendered prompt")
    skills.set_defaults(handler=_skills)


def _skills(args: argparse.Namespace) -> int:
    from skills import builtin_skills, skill_by_name

    if args.name is None:
        for skill in builtin_skills():
            print(f"{skill.name:14} {skill.description}")
        return 0
    skill = skill_by_name(args.name)
    print(f"{skill.name}: {skill.description}")
    print(f"tools: {', '.join(sorted(skill.tools))}\n")
    print(skill.render(repository="<repository>", branch="<branch>"))
    return 0
