# Laid out like prom/prometheus: /bin/prometheus, /etc/prometheus, data in /prometheus, user nobody.
ARG TOOLS_IMAGE
FROM ${TOOLS_IMAGE}
RUN mkdir -p /prometheus /etc/prometheus && chown -R nobody:nogroup /prometheus /etc/prometheus
USER nobody
EXPOSE 9090
VOLUME ["/prometheus"]
WORKDIR /prometheus
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
