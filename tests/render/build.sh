#!/bin/bash
cd "$(dirname "$0")" && ./node_modules/.bin/esbuild src/main.jsx --bundle --outfile=dist/bundle.js --format=iife --jsx=automatic --loader:.js=jsx --loader:.ttf=empty --loader:.woff=empty --loader:.woff2=empty --loader:.svg=dataurl --define:process.env.NODE_ENV='"production"' --define:global=window --minify --log-level=warning
