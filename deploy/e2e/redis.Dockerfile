# Stand-in for redis/redis-stack-server: Debian's redis-server with
# RediSearch 2.6 (../shared/redis-modules), started the way Redis Stack's
# image starts it, REDIS_ARGS included. Context: a directory holding
# redisearch.so.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /data /opt/redis-stack/lib
COPY redisearch.so /opt/redis-stack/lib/redisearch.so
RUN chmod 0755 /opt/redis-stack/lib/redisearch.so
WORKDIR /data
EXPOSE 6379
CMD ["sh", "-c", "exec redis-server --dir /data --protected-mode no --daemonize no --loadmodule /opt/redis-stack/lib/redisearch.so ${REDIS_ARGS}"]
