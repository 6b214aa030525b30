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

{{/* The canary rollout (values canary): the sides each enabled model runs, "stable" and, with the
canary on, "canary". */}}
{{- define "leakwatch.sides" -}}
{{- $facts := include "leakwatch.facts" . | fromYaml -}}
{{- if .Values.canary.enabled -}}
{{- toYaml $facts.canary.sides -}}
{{- else -}}
{{- toYaml (list (first $facts.canary.sides)) -}}
{{- end -}}
{{- end -}}

{{/* One side's objects: the stable side's are the model's (<release>-<profile>), the canary's
<release>-<profile>-canary; dict "root" $ "name" <profile> "side" <side>. The router's are
<release>-<profile>-router (side "router"). */}}
{{- define "leakwatch.sideFullname" -}}
{{- $facts := include "leakwatch.facts" .root | fromYaml -}}
{{- if eq .side (first $facts.canary.sides) -}}
{{- include "leakwatch.modelFullname" . -}}
{{- else -}}
{{- printf "%s-%s" (include "leakwatch.modelFullname" . | trunc 55 | trimSuffix "-") .side -}}
{{- end -}}
{{- end -}}

{{/* Selector of one side's pods. The stable side's is the model's, as without the canary (its pods
are not restarted when the canary is turned on); the canary's and the router's pods have their own
component, so no selector of the stable side (its Deployment, Service, budget, the healer) takes
them. dict "root" $ "name" <profile> "side" <side>. */}}
{{- define "leakwatch.sideSelector" -}}
{{- $facts := include "leakwatch.facts" .root | fromYaml -}}
{{- if eq .side (first $facts.canary.sides) -}}
{{- include "leakwatch.modelSelector" . -}}
{{- else -}}
app.kubernetes.io/name: leakwatch
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ index $facts.canary.components .side }}
{{ $facts.modelLabel }}: {{ .name }}
{{- if ne .side "router" }}
{{ $facts.canary.sideLabel }}: {{ .side }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* A model's values for one side: the canary's are the profile's with canary.image, extraArgs, env
and replicas over them. dict "root" $ "model" <model values> "side" <side>. */}}
{{- define "leakwatch.sideModel" -}}
{{- $facts := include "leakwatch.facts" .root | fromYaml -}}
{{- $m := deepCopy .model -}}
{{- if ne .side (first $facts.canary.sides) -}}
{{- $c := .root.Values.canary -}}
{{- $_ := set $m "replicas" $c.replicas -}}
{{- $_ = set $m "image" (dict "repository" (default $m.image.repository $c.image.repository) "tag" (default $m.image.tag $c.image.tag)) -}}
{{- $_ = set $m "args" (concat $m.args $c.extraArgs) -}}
{{- $_ = set $m "env" (mergeOverwrite (deepCopy (default dict $m.env)) $c.env) -}}
{{- end -}}
{{- toYaml $m -}}
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
