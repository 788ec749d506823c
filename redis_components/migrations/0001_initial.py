from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="TaskQueues",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "task queues",
                "verbose_name_plural": "task queues",
                "permissions": [
                    ("view_task_queues", "Can see the task queues, their tasks and workers"),
                    ("manage_task_queues", "Can requeue, delete, cancel and purge tasks"),
                ],
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
