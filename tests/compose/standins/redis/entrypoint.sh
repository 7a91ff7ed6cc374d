#!/bin/sh
# redis-server as the redis user, protected mode off (its clients are other containers).
set -e
if [ "$1" = redis-server ]; then
    shift
    if [ -n "$1" ] && [ "${1#-}" = "$1" ]; then  # a config file must stay the first argument
        conf=$1
        shift
        set -- redis-server "$conf" --protected-mode no "$@"
    else
        set -- redis-server --protected-mode no "$@"
    fi
    if [ "$(id -u)" = 0 ]; then
        chown -R redis:redis /data
        exec setpriv --reuid=redis --regid=redis --init-groups "$@"
    fi
fi
exec "$@"
