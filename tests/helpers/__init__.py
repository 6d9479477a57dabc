"""What several test modules share: fixtures, twin and recipe set-ups, waits, and the suite's timeline plugin."""
