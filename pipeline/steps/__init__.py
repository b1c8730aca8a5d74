"""Plain functions behind the Luigi tasks, testable without Luigi."""
