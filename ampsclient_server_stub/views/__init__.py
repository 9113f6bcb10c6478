"""Views over SOW topics (``<SOW>/<View>``, with joins) and aggregated subscriptions
(``projection``/``grouping`` options): see ``docs/views.md``."""
