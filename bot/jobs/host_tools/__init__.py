"""Host tools: tools a job's agent calls that run on the worker, not in its container.

``review_change`` records a structured review for the executor, and ``publish_docset`` moves
a repository's publish branch to a reviewed commit through the push relay. ``remember`` lives
in ``bot.agents.memory``; ``search`` and ``get_page`` (the ``consume`` skill's, which no job
kind runs) in ``bot.agents.consume``. The executor decides which of them a job gets; import
each from its module (``from bot.jobs.host_tools.review import ReviewChangeTool``): this
package imports nothing.
"""
