# Laid out like the official haproxy image: config in /usr/local/etc/haproxy/haproxy.cfg, user haproxy,
# SIGUSR1 for a graceful stop.
ARG TOOLS_IMAGE
FROM ${TOOLS_IMAGE}
RUN mkdir -p /usr/local/etc/haproxy /var/lib/haproxy && chown haproxy:haproxy /var/lib/haproxy
USER haproxy
STOPSIGNAL SIGUSR1
ENTRYPOINT ["haproxy", "-W", "-db"]
CMD ["-f", "/usr/local/etc/haproxy/haproxy.cfg"]
