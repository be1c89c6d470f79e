"""Work coming in from a forge: the webhook door (signature, delivery id, queue), the
events a delivery is normalized into, and what each event asks Riverbeam to do.

- ``signatures``: GitHub's HMAC-SHA256 and GitLab's token, checked on the raw body;
- ``forge_events``: ``ForgeEvent``, the forge-neutral events (a comment, a label, a pull request);
- ``github`` / ``gitlab``: a delivery's payload into a ``ForgeEvent``, or why it is ignored;
- ``door``: what ``POST /webhooks/<forge>`` does, framework-free;
- ``deliveries``: the delivery ids in Redis (``SET NX`` with a time to live) and the queue;
- ``lookups``: ``ForgeLookup``, what the workers ask the forge (the clients implement it);
- ``actions``: an event and the configuration into the intended actions (pure);
- ``handler``: the worker's side, carrying an action out through the job service.
"""
