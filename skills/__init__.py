"""Skills: a system prompt and a tool allowlist per kind of docs work.

Each skill is one ``skills/<name>.md`` file; see ``docs/skills.md`` for the format.
"""

from skills.loader import Skill, builtin_skills, load_skill, skill_by_name

__all__ = ["Skill", "builtin_skills", "load_skill", "skill_by_name"]
