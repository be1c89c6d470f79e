"""The forges (GitHub, GitLab): work in through webhooks, pull requests, reviews and statuses out."""
