#!/bin/sh
echo "coverage is not supported in grove's offline build" >&2
exit 1
