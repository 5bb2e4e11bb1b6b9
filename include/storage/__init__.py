"""Storage: the lakehouse layout (:mod:`.layout`), Delta tables (:mod:`.delta`), small state files (:mod:`.files`)."""
