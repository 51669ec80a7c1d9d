"""The App API: device auth, sessions, prompts, SSE bridge, file API."""
