"""Host tools: tools a job's agent calls that run on the worker, not in its container.

``search`` and ``get_page`` read the job's tree through the path jail, ``review_change``
records a structured review for the executor, and ``publish_docset`` moves a repository's
publish branch to a reviewed commit through the push relay. ``remember`` lives in
``bot.agents.memory``. The executor decides which of them a job gets; import each from its module
(``from bot.jobs.host_tools.search import SearchTool``): this package imports nothing.
"""
