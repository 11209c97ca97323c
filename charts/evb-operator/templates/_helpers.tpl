{{/*
Names and labels shared by every template of the chart.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "evb-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: fullnameOverride, else the release name, with the chart
name appended unless the release name already contains it (63 characters at most).
*/}}
{{- define "evb-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart-version, the value of helm.sh/chart. */}}
{{- define "evb-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pod (never change them: selectors are immutable). */}}
{{- define "evb-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "evb-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object of the release. */}}
{{- define "evb-operator.labels" -}}
helm.sh/chart: {{ include "evb-operator.chart" . }}
{{ include "evb-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: evb
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "evb-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "evb-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image (also the default orderer image). */}}
{{- define "evb-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
