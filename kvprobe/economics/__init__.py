"""Task economics: what each block costs over a task, compaction, cost per accepted task, A/B compare."""
