from __future__ import annotations

from django.contrib.auth.views import LogoutView
from django.urls import path

from . import catalogues, checkouts, listings, views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.DemoLoginView.as_view(), name="login"),
    path("logout/", LogoutView.as_view(), name="logout"),
    path("market/", views.market, name="market"),
    path("market/buy/<str:item>/<int:seller>/", views.buy, name="buy"),
    path("market/buy-many/", views.buy_many, name="buy_many"),
    path("inventory/", listings.inventory, name="inventory"),
    path("inventory/sell/", views.sell, name="sell"),
    path("inventory/withdraw/", views.withdraw, name="withdraw"),
    path("inventory/list-all/", listings.bulk_list, name="bulk_list"),
    path("inventory/list-all/progress/", listings.bulk_progress, name="bulk_progress"),
    path("notices/", views.notices, name="notices"),
    path("notices/waiting/", views.waiting, name="waiting_emails"),
    path("checkouts/", checkouts.checkouts, name="checkouts"),
    path("checkouts/slots/", checkouts.checkout_slots, name="checkout_slots"),
    path("checkouts/load/", checkouts.checkout_load, name="checkout_load"),
    path("catalogue/", catalogues.catalogue_page, name="catalogue"),
    path("catalogue/progress/", catalogues.catalogue_progress, name="catalogue_progress"),
    path("catalogue/publish/", catalogues.catalogue_publish, name="catalogue_publish"),
    path("catalogue/download/", catalogues.catalogue_download, name="catalogue_download"),
    path("contacts/", views.contacts, name="contacts"),
    path("guild/", views.guild, name="guild"),
    path("chats/", views.chats, name="chats"),
    path("chats/<int:chat_id>/", views.chats, name="chat"),
]
