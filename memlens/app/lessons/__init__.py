"""The Lessons tab and the `lessons` command: the article's claims measured."""
