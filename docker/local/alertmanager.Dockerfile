# Laid out like prom/alertmanager: /bin/alertmanager, /etc/alertmanager, data in /alertmanager, user nobody.
ARG TOOLS_IMAGE
FROM ${TOOLS_IMAGE}
RUN ln -s /usr/bin/prometheus-alertmanager /bin/alertmanager \
 && mkdir -p /alertmanager /etc/alertmanager && chown -R nobody:nogroup /alertmanager /etc/alertmanager
USER nobody
EXPOSE 9093
VOLUME ["/alertmanager"]
WORKDIR /alertmanager
ENTRYPOINT ["/bin/alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
