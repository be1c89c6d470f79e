"""Reading a docs change as prose, free of any web framework: the words each changed line
pair changed (``bot.review.words``) and the links of the changed pages checked against the
approved commit's tree (``bot.review.links``). The API, the web pages and the CLI show what
these compute; nothing here is stored."""
