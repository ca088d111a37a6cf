"""From measurement to reader: tidy tables with provenance, their verification against git, the
house plot style, the claims ledger, recorded wall times of `make run`, kernel excerpts."""
