"""What a person may do on a forge repository, in the forge's own terms. The workers learn
it through ``bot.forge.inbound.lookups.ForgeLookup``, which the forge clients implement.

GitHub's collaborator permissions are the scale; GitLab's access levels map onto it:

==============  ====================  =============================
permission      GitHub                GitLab access level
==============  ====================  =============================
none            none                  0 (no access), 5 (minimal)
read            read                  10 (guest), 15 (planner)
triage          triage                20 (reporter)
write           write                 30 (developer)
maintain        maintain              40 (maintainer)
admin           admin                 50 (owner), 60 (admin)
==============  ====================  =============================
"""

from __future__ import annotations

from enum import IntEnum

from bot.config import ForgePermissionName


class ForgePermission(IntEnum):
    NONE = 0
    READ = 1
    TRIAGE = 2
    WRITE = 3
    MAINTAIN = 4
    ADMIN = 5

    @classmethod
    def named(cls, name: ForgePermissionName) -> ForgePermission:
        return cls[name.upper()]

    @classmethod
    def from_github(cls, role_name: str) -> ForgePermission:
        """From the ``role_name`` (or the older ``permission``) of GitHub's collaborator
        permission; a custom role GitHub does not name counts as ``read``."""
        found = cls.__members__.get(role_name.upper())
        return found if found is not None else cls.READ

    @classmethod
    def from_gitlab(cls, access_level: int) -> ForgePermission:
        """From a GitLab member's ``access_level``."""
        for floor, permission in _GITLAB_LEVELS:
            if access_level >= floor:
                return permission
        return cls.NONE

    @property
    def label(self) -> ForgePermissionName:
        name: ForgePermissionName = self.name.lower()  # type: ignore[assignment]
        return name


_GITLAB_LEVELS = (
    (50, ForgePermission.ADMIN),
    (40, ForgePermission.MAINTAIN),
    (30, ForgePermission.WRITE),
    (20, ForgePermission.TRIAGE),
    (10, ForgePermission.READ),
)
