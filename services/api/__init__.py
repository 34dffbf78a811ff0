"""The read service: recall, memory views, working windows, health."""
