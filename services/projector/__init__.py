"""The projector process: copies every session log into SQLite, serves old ranges.

The copying and serving logic is the ``eventstore.projector`` library; this
package is the process around it (settings, NATS connection, lease, signals).
"""
