#!/bin/sh
# Without a configuration file redis-server answers only loopback clients
# (protected mode); the redis image turns that off, and so does this: the
# server is reached over compose's own network, never published.
set -eu
if [ "${1:-}" = redis-server ]; then
  set -- "$@" --protected-mode no
fi
exec "$@"
