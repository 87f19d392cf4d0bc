"""The bill's sentences, in one place: what each part of the spend is in words, what to do when a part is
most of it, and what the fixes line says when a log cannot be simulated. Every output (text, Markdown,
HTML, JSON) takes its words from here, so refining one (per agent, say) changes them all."""
from __future__ import annotations

# token class (economics.token_costs.CLASSES) -> (what that spend is, what to do when it is most of the bill)
SPEND_WORDS: dict[str, tuple[str, str]] = {
    "read": ("re-reading long contexts from the cache", "compact or clear between tasks"),
    "write_5m": ("writing contexts to the cache (5-minute lifetime)",
                 "the causes below say which writes rebuilt what was cached"),
    "write_1h": ("writing contexts to the cache (1-hour lifetime, at twice the input price)",
                 "keep the 1-hour lifetime for pauses past 5 minutes"),
    "fresh": ("input sent without the cache", "the causes below say which misses sent it again"),
    "output": ("output (answers, tool calls and reasoning)", "caching does not change it"),
}
# the advice instead where no miss cost anything (every request read what an ideal prefix cache would have):
# the causes are empty, and what was written or sent fresh was new to the cache when it went (a session's start, a
# return after a pause no lifetime covers, the part each turn adds), on any provider and in any agent
WITHOUT_MISSES: dict[str, str] = {
    "write_5m": "new to the cache when written (a session's start or a return after a pause no lifetime covers, "
                "each turn's new part); no miss rebuilt any of it",
    "fresh": "new to the cache when sent (a session's start or a return after a pause no lifetime covers, each "
             "turn's new part); no cache could have read it",
}

# the advice instead where most of the input sent without the cache went with caching off, as the log says
CACHING_OFF_WORDS = "most of it was sent with prompt caching off (the log says so): the notes below name the setting"

# the bill's columns, in every output: (class, short header)
COLUMN_NAMES: tuple[tuple[str, str], ...] = (("read", "reads"), ("write_5m", "5m writes"),
                                             ("write_1h", "1h writes"), ("fresh", "fresh"), ("output", "output"))

# where fixes were to be priced but no request carried its body: nothing to re-simulate
NO_BODIES = "no request bodies: fixes cannot be simulated"
NO_FIX_PAYS = "none pays for itself on this log"

