"""`run-probe`: the four-request live cache experiment (prepare, confirm, new question, changed beginning)."""
