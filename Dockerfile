# One image for every Shopstream service; the command picks the service: `pnpm start <service>`.
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
USER node
ENTRYPOINT ["pnpm", "start"]
