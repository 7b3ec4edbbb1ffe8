"""The adversarial corpus: hostile and odd inputs, each with the outcome shiftbench must give (see case.py)."""
