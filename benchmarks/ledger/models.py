"""The ledger's tables (imported by benchmarks.models, so they are the benchmarks app's)."""
from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from benchmarks.models import new_public_id  # benchmarks.models imports this module at its end


class Prediction(models.Model):
    """One answer of the decision page or POST /api/v1/decide/, as it was answered: the inputs the
    advisor read, its version, and each candidate's step-time estimate with its band. Immutable:
    a new estimate is a new prediction. `estimates` is a list of {candidate, label, backend,
    quantization (the inventory's), gpus (the estimate's layout), correction (in words, "" for
    none), metrics: {figure: {value, band, raw}}} (`raw`: before the host's correction)."""

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    created = models.DateTimeField(default=timezone.now, db_index=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    decision = models.ForeignKey("benchmarks.Decision", models.SET_NULL, null=True, blank=True,
                                 related_name="predictions")
    host = models.ForeignKey("benchmarks.Host", models.SET_NULL, null=True, blank=True, related_name="predictions")
    gpu_name = models.CharField("GPU", max_length=200)
    gpu_count = models.PositiveIntegerField()
    model_name = models.CharField(max_length=200)
    users = models.PositiveIntegerField(db_index=True)
    prompt_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    inputs = models.JSONField()  # the workload, GPU and engine builds as the advisor read them
    advisor_version = models.CharField(max_length=100)
    estimates = models.JSONField()

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"prediction {self.public_id[:8]}: {self.model_name} on {self.gpu_count}× {self.gpu_name}"

    def get_absolute_url(self):
        return reverse("prediction-detail", args=[self.public_id])

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ValueError("a prediction is immutable: a new estimate is a new prediction")
        super().save(*args, **kwargs)


class PredictionPair(models.Model):
    """One estimated figure beside what a run's level (or an imported report's level) measured of
    it. Deleting the run or the report deletes its pairs."""

    prediction = models.ForeignKey(Prediction, models.CASCADE, related_name="pairs")
    run = models.ForeignKey("benchmarks.Run", models.CASCADE, null=True, blank=True, related_name="prediction_pairs")
    level = models.ForeignKey("benchmarks.LevelResult", models.CASCADE, null=True, blank=True, related_name="+")
    report = models.ForeignKey("benchmarks.ImportedReport", models.CASCADE, null=True, blank=True,
                               related_name="prediction_pairs")
    source = models.CharField(max_length=60)  # "level-<pk>" or "report-<pk>-<level index>": one level
    level_label = models.CharField(max_length=200)
    host = models.ForeignKey("benchmarks.Host", models.SET_NULL, null=True, blank=True, related_name="+")
    gpu_name = models.CharField("GPU", max_length=200)
    candidate = models.CharField(max_length=50)
    backend = models.CharField(max_length=30, db_index=True)
    metric = models.CharField(max_length=40, db_index=True)
    estimated = models.FloatField()
    raw = models.FloatField()  # the estimate before the host's correction (= estimated without one)
    band_low = models.FloatField(null=True, blank=True)
    band_high = models.FloatField(null=True, blank=True)
    measured = models.FloatField()
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["prediction", "source", "metric"]
        constraints = [models.UniqueConstraint(fields=["prediction", "source", "candidate", "metric"],
                                               name="one_pair_per_prediction_level_figure")]

    @property
    def band(self) -> tuple[float, float] | None:
        return (self.band_low, self.band_high) if self.band_low is not None and self.band_high is not None else None

    @property
    def measured_at(self):
        """The run's or the report's permalink (the level's anchor on a run)."""
        if self.run_id:
            return f"{self.run.get_absolute_url()}#level-{self.level.public_id}" if self.level_id else \
                self.run.get_absolute_url()
        return self.report.get_absolute_url()
