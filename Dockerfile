# One image for every Shopstream service; the command picks the service (`docker run <image> ingest-api`).
# The entrypoint is node itself, not `pnpm start`: pnpm does not pass SIGTERM on to the service (it exits
# and leaves the service running), so `docker stop` would kill the service without its drain.
# test/start.e2e.spec.ts runs this exact command line and checks the drain on SIGTERM.
FROM node:20-bookworm-slim
RUN npm install -g pnpm@10 && mkdir -p /app
WORKDIR /app
COPY package.json pnpm-lock.yaml pnpm-workspace.yaml tsconfig.json ./
COPY packages ./packages
COPY services ./services
COPY bench/package.json ./bench/package.json
COPY test/package.json ./test/package.json
RUN pnpm install --frozen-lockfile
ENV NODE_ENV=production PORT=8080
EXPOSE 8080
# The embedded mode's default DATA_DIR, writable by the user the services run as.
RUN mkdir -p /app/.data && chown node /app/.data
USER node
ENTRYPOINT ["node", "--import", "tsx", "services/all-in-one/src/main.ts"]
