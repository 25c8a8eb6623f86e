# One image for every Shopstream service; the command picks the service (`docker run <image> ingest-api`).
# Two stages: `build` installs every dependency and compiles the workspace to JavaScript (`pnpm build`); the
# image keeps only the compiled dist/ trees, the SQL migrations and the production dependencies (no
# TypeScript, no tsx, no test tools), at the paths the workspace has them.
# The entrypoint is node itself, not `pnpm start`: pnpm does not pass SIGTERM on to the service (it exits
# and leaves the service running), so `docker stop` would kill the service without its drain.
# test/start.node24.e2e.spec.ts runs this exact command line, on Node 24 and a fresh `pnpm build`, and checks
# the drain on SIGTERM.
FROM node:24-bookworm-slim AS build
RUN npm install -g pnpm@10
WORKDIR /src
COPY package.json pnpm-lock.yaml pnpm-workspace.yaml tsconfig.json tsconfig.build.json ./
# pnpm applies these to its dependencies at install (patchedDependencies in pnpm-workspace.yaml).
COPY patches ./patches
COPY packages ./packages
COPY services ./services
COPY bench/package.json ./bench/package.json
COPY test/package.json ./test/package.json
RUN pnpm install --frozen-lockfile
RUN pnpm build
# The runtime tree: each built package's manifest and dist/, the migrations (packages/<name>/migrations and
# services/<name>/migrations, beside each one's dist/, where the runner looks for them), then the production dependencies
# of the two entry points: all-in-one (every service) and
# the CLI (`docker run --entrypoint node <image> services/cli/dist/main.js migrate`).
RUN mkdir /app && cp package.json pnpm-lock.yaml pnpm-workspace.yaml /app/ \
 && for d in packages/* services/*; do \
      if [ -d "$d/dist" ]; then mkdir -p "/app/$d" && cp "$d/package.json" "/app/$d/" && cp -R "$d/dist" "/app/$d/dist"; fi; \
      if [ -d "$d/migrations" ]; then cp -R "$d/migrations" "/app/$d/migrations"; fi; \
    done \
 && find /app -name '*.tsbuildinfo' -delete \
 && cd /app && pnpm install --prod --frozen-lockfile --offline --filter @shopstream/all-in-one... --filter @shopstream/cli...

FROM node:24-bookworm-slim
ENV NODE_ENV=production PORT=8080
WORKDIR /app
# Owned by root: the services run as `node` and cannot change their own code.
COPY --from=build /app /app
# The embedded mode's default DATA_DIR, writable by the user the services run as.
RUN mkdir -p /app/.data && chown node /app/.data
USER node
EXPOSE 8080
# Liveness; readiness (Kafka and Postgres reachable) is GET /readyz, as docker-compose.yml checks. slim has no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "services/all-in-one/dist/main.js"]
