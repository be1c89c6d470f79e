"""What the workers post back to a forge and ask it: the contract every forge implements
(``contract``), one HTTP call under a total deadline (``http``), the built-in GitHub and
GitLab clients (``github_api``, ``gitlab_api``) and which client a forge table gets
(``choice``)."""
