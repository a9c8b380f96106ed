# Context governance: how much ledger a summary covers, and the database summary lock's lease.

from django.db import migrations, models


class Migration(migrations.Migration):

    # 0003_event_search (session recall) was written in parallel on top of 0001; this one
    # follows it so that the graph has a single leaf. If 0003 is rebased onto this
    # migration, this dependency goes back to 0001_initial.
    dependencies = [
        ("sessions_app", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="summary",
            name="covered_events",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="summary",
            name="covered_tokens",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="summary",
            name="lease_token",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="summary",
            name="lease_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
