"""Operations: topic admin, the embedded stack, dashboards and scrape config."""
