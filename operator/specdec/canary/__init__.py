"""A canary for draft changes: the new draft serves a share of the traffic beside the current one, and a
sequential test on paired scrape windows decides whether it is promoted (specdec.canary.decision)."""
