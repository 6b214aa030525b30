{{/* Facts generated from config/stack.yaml and config/healer.yaml (files/generated/facts.yaml). */}}
{{- define "leakwatch.facts" -}}
{{ .Files.Get "files/generated/facts.yaml" }}
{{- end -}}

{{/* This release among others in the cluster: the value of the release label the monitors put on
every series they scrape, and what the generated rules and dashboards select. */}}
{{- define "leakwatch.releaseId" -}}
{{- printf "%s/%s" .Release.Namespace .Release.Name -}}
{{- end -}}

{{- define "leakwatch.name" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<profile>, for one model's objects; dict "root" $ "name" <profile>. */}}
{{- define "leakwatch.modelFullname" -}}
{{- printf "%s-%s" (include "leakwatch.name" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "leakwatch.commonLabels" -}}
app.kubernetes.io/name: leakwatch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector of one model's pods; the healer acts only on pods carrying the model label. */}}
{{- define "leakwatch.modelSelector" -}}
{{- $facts := include "leakwatch.facts" .root | fromYaml -}}
app.kubernetes.io/name: leakwatch
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: vllm
{{ $facts.modelLabel }}: {{ .name }}
{{- end -}}

{{/* Selector of every model pod of this release (the monitors). */}}
{{- define "leakwatch.vllmSelector" -}}
app.kubernetes.io/name: leakwatch
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: vllm
{{- end -}}

{{- define "leakwatch.leakwatchImage" -}}
{{- printf "%s:%s" .Values.leakwatchImage.repository (default .Chart.AppVersion .Values.leakwatchImage.tag) -}}
{{- end -}}

{{- define "leakwatch.healerName" -}}
{{- printf "%s-healer" (include "leakwatch.name" .) -}}
{{- end -}}

{{- define "leakwatch.scrapeInterval" -}}
{{- $facts := include "leakwatch.facts" . | fromYaml -}}
{{- default $facts.scrapeInterval .Values.monitoring.interval -}}
{{- end -}}
