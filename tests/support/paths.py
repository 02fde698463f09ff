"""Where things are, for tests at any depth."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
KEYWORD_DATA = DATA / "keyword"
