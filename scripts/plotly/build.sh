#!/bin/sh
# Builds neuron_explorer/dashboard/assets/plotly-nx.min.js: plotly.js with only the trace types the
# dashboard draws (scatter in the core, bar, heatmap, icicle: entry.js), 1.3 MB against the full
# bundle's 4.8 MB that dash serves by default (issue 42: the browser evaluated 4.8 MB before the
# first page). The version is the one the installed plotly package ships (plotly.min.js's header);
# rebuild when it changes:  sh scripts/plotly/build.sh [PLOTLY_JS_VERSION]
set -e
here=$(cd "$(dirname "$0")" && pwd)
version=${1:-4.1.1}
work=$(mktemp -d)
cp "$here/entry.js" "$work/"
cd "$work"
npm install --no-audit --no-fund --ignore-scripts "plotly.js@$version" esbuild@0.25 >/dev/null
./node_modules/.bin/esbuild entry.js --bundle --minify --format=iife --global-name=Plotly --target=es2018 \
  --define:process.env.NODE_ENV='"production"' --define:global=window --legal-comments=none --outfile=plotly-nx.min.js
{ printf '/* plotly.js v%s (MIT license, Plotly, Inc.): core, bar, heatmap, icicle; built by scripts/plotly/build.sh */\n' "$version"
  cat plotly-nx.min.js; } > "$here/../../neuron_explorer/dashboard/assets/plotly-nx.min.js"
rm -rf "$work"
