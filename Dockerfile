# The `rollout` image: the CLI and its workers (`rollout worker`, the default command), built offline from the local
# debian:bookworm-slim base image (scripts/setup.sh) with Node.js and npm staged from the host and the lock file's
# dependencies (`npm ci`). Build it with scripts/build-image.sh (it stages .image/ first); docs/production.md.
FROM debian:bookworm-slim AS build
COPY .image/node /usr/local/bin/node
COPY .image/npm /usr/local/lib/node_modules/npm
# The host's CA bundle: npm's registry (and, in the worker, model and cloud APIs) through the host's TLS proxy, if any.
COPY .image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt npm_config_cafile=/etc/ssl/certs/ca-certificates.crt \
    npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
WORKDIR /opt/rollout
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY . .
# The workflow bundle ships beside the code (dist/workflow-bundles), so a worker starts without bundling; the cache
# itself is the user's (~/.cache/rollout), writable where the root file system is read-only (deploy/kubernetes).
RUN ROLLOUT_CACHE_DIR=/tmp/rollout-cache npm run build && mv /tmp/rollout-cache/workflow-bundles dist/ \
    && rm -rf /tmp/rollout-cache && npm prune --omit=dev --ignore-scripts \
    && rm -rf test examples dist/test dist/examples .image

FROM debian:bookworm-slim
COPY --from=build /usr/local/bin/node /usr/local/bin/node
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /opt/rollout /opt/rollout
RUN ln -s /opt/rollout/bin/rollout.js /usr/local/bin/rollout \
    && groupadd --gid 10001 rollout && useradd --uid 10001 --gid rollout --create-home rollout \
    && mkdir -p /jobs && chown rollout:rollout /jobs
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt NODE_ENV=production
# Non-root by default (kubernetes and cloud providers need nothing more); the docker provider needs the Docker
# socket: run with --group-add <the socket's group id>, or as root (docs/production.md).
USER rollout
WORKDIR /jobs
ENTRYPOINT ["rollout"]
CMD ["worker"]
