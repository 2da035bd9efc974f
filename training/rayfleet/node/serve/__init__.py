"""The serve gate in front of Ray Serve's proxy, and Serve's deployment through the dashboard's REST API."""
